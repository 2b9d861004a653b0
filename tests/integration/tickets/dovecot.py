"""A project-local Dovecot IMAP server for tests: own config, own maildir, 127.0.0.1 only.

Debian's dovecot-imapd (deploy/dev/packages.sh), started in the foreground with a config written
into a temporary directory; nothing of the machine's Dovecot set-up is read or changed.
"""

from __future__ import annotations

import grp
import imaplib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

DOVECOT = shutil.which("dovecot") or "/usr/sbin/dovecot"
USER, PASSWORD = "support", "imap-test-secret"

CONFIG = """\
base_dir = {root}/run
state_dir = {root}/state
log_path = {root}/dovecot.log
protocols = imap
listen = 127.0.0.1
ssl = no
auth_mechanisms = plain login
disable_plaintext_auth = no
default_login_user = {login_user}
default_internal_user = {internal_user}
default_internal_group = {internal_group}
first_valid_uid = {uid}
last_valid_uid = 0
mail_location = maildir:{root}/mail/%u
mail_uid = {uid}
mail_gid = {gid}
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {root}/passwd
}}
userdb {{
  driver = passwd-file
  args = username_format=%u {root}/passwd
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service anvil {{
  chroot =
}}
service imap-login {{
  chroot =
}}
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class ImapServer:
    host: str
    port: int
    user: str
    password: str
    root: Path

    def client(self) -> imaplib.IMAP4:
        imap = imaplib.IMAP4(self.host, self.port, timeout=10)
        imap.login(self.user, self.password)
        return imap

    def append(self, raw: bytes, mailbox: str = "INBOX") -> None:
        """Deliver a mail the way a mail client would: IMAP APPEND, unseen."""
        with self.client() as imap:
            typ, data = imap.append(mailbox, "", imaplib.Time2Internaldate(time.time()), raw)
            assert typ == "OK", data

    def flags(self, mailbox: str = "INBOX") -> list[str]:
        """The flags of every mail in the mailbox, in order."""
        with self.client() as imap:
            _typ, count = imap.select(mailbox)
            if int(count[0]) == 0:
                return []
            _typ, data = imap.fetch("1:*", "(FLAGS)")
            return [d.decode() for d in data if d]

    def log(self) -> str:
        path = self.root / "dovecot.log"
        return path.read_text(errors="replace") if path.exists() else ""


@contextmanager
def dovecot_server() -> Iterator[ImapServer]:
    """Start Dovecot on a free port of 127.0.0.1; stop it and remove its files afterwards."""
    if not os.path.exists(DOVECOT):
        raise RuntimeError("dovecot is not installed: run `make test` (deploy/dev/packages.sh)")
    root = Path(tempfile.mkdtemp(prefix="portal-dovecot-"))
    if os.geteuid() == 0:
        # Dovecot refuses mail access as root; the mailbox belongs to an unprivileged user.
        mail_user = pwd.getpwnam("nobody")
        login_user, internal_user, internal_group = "dovenull", "dovecot", "dovecot"
    else:
        # Without root Dovecot cannot chown its sockets to the dovecot group: all runs as us.
        mail_user = pwd.getpwuid(os.getuid())
        login_user = internal_user = mail_user.pw_name
        internal_group = grp.getgrgid(mail_user.pw_gid).gr_name
    uid, gid = mail_user.pw_uid, mail_user.pw_gid
    port = _free_port()
    root.chmod(0o755)
    for sub in ("run", "state", "mail"):
        (root / sub).mkdir()
    os.chown(root / "mail", uid, gid)
    (root / "passwd").write_text(f"{USER}:{{PLAIN}}{PASSWORD}:{uid}:{gid}::{root}/mail/{USER}\n")
    conf = root / "dovecot.conf"
    conf.write_text(
        CONFIG.format(
            root=root,
            port=port,
            uid=uid,
            gid=gid,
            login_user=login_user,
            internal_user=internal_user,
            internal_group=internal_group,
        )
    )
    process = subprocess.Popen(
        [DOVECOT, "-F", "-c", str(conf)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    server = ImapServer("127.0.0.1", port, USER, PASSWORD, root)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with server.client():
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    out = process.stdout.read().decode(errors="replace") if process.stdout else ""
                    raise RuntimeError(f"dovecot did not start:\n{out}\n{server.log()}") from None
                time.sleep(0.05)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout:
            process.stdout.close()
        shutil.rmtree(root, ignore_errors=True)
