"""Parse raw mail into what a ticket needs; pure Python, no database.

Robust against what real mail brings: unknown charsets, HTML-only bodies, encoded words with
bad bytes, NUL characters. Mail whose MIME structure cannot be trusted raises MailParseError so
the caller can quarantine it instead of guessing.
"""

from __future__ import annotations

import email
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from email import errors as email_errors
from email import policy
from email.message import EmailMessage
from email.utils import getaddresses, parseaddr
from html.parser import HTMLParser

# Defects that mean the body cannot be split reliably into its parts.
STRUCTURAL_DEFECTS = (
    email_errors.NoBoundaryInMultipartDefect,
    email_errors.StartBoundaryNotFoundDefect,
    email_errors.MultipartInvariantViolationDefect,
)
AUTO_PRECEDENCE = {"bulk", "junk", "list", "auto_reply"}
AUTO_SENDERS = re.compile(r"^(mailer-daemon|postmaster|no-?reply|do-?not-?reply)@", re.I)
MSGID = re.compile(r"<[^<>\s]+>")


class MailParseError(ValueError):
    """The mail cannot be turned into a ticket message without guessing."""


@dataclass(frozen=True)
class ParsedAttachment:
    filename: str
    content_type: str
    data: bytes


@dataclass
class ParsedMail:
    message_id: str
    in_reply_to: str
    references: list[str]
    subject: str
    from_email: str
    from_name: str
    to: str
    body_text: str
    body_html: str
    attachments: list[ParsedAttachment] = field(default_factory=list)
    automatic_reason: str = ""
    # A trusted receiving server said the From address passed DMARC or aligned SPF, or the
    # listener itself verified an aligned DKIM signature (PORTAL_MAIL_VERIFY_DKIM).
    sender_authenticated: bool = False

    @property
    def is_automatic(self) -> bool:
        return bool(self.automatic_reason)

    @property
    def thread_ids(self) -> list[str]:
        """Message-IDs this mail answers, nearest first."""
        ids = [self.in_reply_to] if self.in_reply_to else []
        return ids + [r for r in reversed(self.references) if r not in ids]


def clean_text(value: str) -> str:
    """Text safe for PostgreSQL: surrogate-escaped bytes decoded best-effort, NULs removed."""
    if any("\udc80" <= ch <= "\udcff" for ch in value):
        raw = value.encode("utf-8", "surrogateescape")
        try:
            value = raw.decode("utf-8")
        except UnicodeDecodeError:
            value = raw.decode("cp1252", "replace")
    return value.replace("\x00", "")


def decode_bytes(data: bytes, charset: str | None) -> str:
    """Decode with the declared charset; unknown or wrong charsets fall back to UTF-8, cp1252."""
    for candidate in (charset, "utf-8"):
        if not candidate:
            continue
        try:
            return data.decode(candidate)
        except (LookupError, UnicodeDecodeError):
            continue
    return data.decode("cp1252", "replace")


class _TextExtractor(HTMLParser):
    BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "blockquote", "pre", "table"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in {"script", "style", "head"}:
            self.skip += 1
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in {"script", "style", "head"} and self.skip:
            self.skip -= 1
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    """Readable plain text from HTML (the HTML itself is never rendered)."""
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    text = "".join(parser.parts)
    text = re.sub(r"[ \t\r\f\v]+", " ", text)
    return re.sub(r"\n\s*\n\s*\n+", "\n\n", text).strip()


def _header(msg: EmailMessage, name: str) -> str:
    try:
        value = msg.get(name)
    except Exception:  # a header the parser cannot even represent
        value = msg.get_all(name, failobj=[""])[0] if hasattr(msg, "get_all") else ""
    return clean_text(str(value or "")).strip()


def _msgids(value: str) -> list[str]:
    return MSGID.findall(value or "")


def automatic_reason(msg: EmailMessage, envelope_from: str | None) -> str:
    """Why this mail is machine-made (and must never be answered automatically), or ""."""
    if envelope_from is not None and envelope_from.strip() in {"", "<>"}:
        return "null sender"
    if _header(msg, "Return-Path").strip() == "<>":
        return "null sender"
    auto = _header(msg, "Auto-Submitted").lower()
    if auto and auto != "no":
        return f"Auto-Submitted: {auto}"[:80]
    precedence = _header(msg, "Precedence").lower()
    if precedence in AUTO_PRECEDENCE:
        return f"Precedence: {precedence}"
    for name in ("X-Autoreply", "X-Autorespond", "X-Auto-Response-Suppress", "List-Id"):
        if msg.get(name) is not None:
            return name
    if msg.get_content_type() == "multipart/report":
        return "delivery report"
    sender = parseaddr(_header(msg, "From"))[1]
    if AUTO_SENDERS.match(sender):
        return "system sender"
    return ""


def _domain(value: str) -> str:
    """The domain of an address, or the value itself when it is a domain already."""
    return value.strip().strip('<>"').rpartition("@")[2].lower().rstrip(".")


def _result_passes(method: str, properties: str, from_domain: str) -> bool:
    """Whether one "dmarc=pass ..." or "spf=pass ..." result vouches for `from_domain`:
    DMARC for that From domain, SPF only when the envelope sender's domain is that domain or
    one below it (aligned), since SPF alone says nothing about the From header."""
    props = {k.lower(): _domain(v) for k, v in re.findall(r"([\w.-]+)\s*=\s*([^\s;]+)", properties)}
    if method == "dmarc":
        return props.get("header.from", from_domain) == from_domain
    mailfrom = props.get("smtp.mailfrom", "")
    return bool(mailfrom) and (mailfrom == from_domain or mailfrom.endswith("." + from_domain))


def sender_authenticated(
    headers: list[str], *, from_address: str, trusted_authserv_ids: Collection[str]
) -> bool:
    """True when an Authentication-Results header (RFC 8601) written by one of our own trusted
    receiving servers says `from_address` passed DMARC or aligned SPF. Headers of any other
    authserv-id are ignored: a sender can write whatever it likes into its own mail."""
    trusted = {t.strip().lower() for t in trusted_authserv_ids if t.strip()}
    from_domain = _domain(from_address)
    if not trusted or not from_domain:
        return False
    for header in headers:
        text = re.sub(r"\([^()]*\)", " ", header)  # comments
        authserv, _sep, results = text.partition(";")
        if not authserv.split() or authserv.split()[0].lower() not in trusted:
            continue
        for result in results.split(";"):
            match = re.match(r"\s*(dmarc|spf)\s*=\s*([a-z]+)(.*)$", result, re.I | re.S)
            passed = match is not None and match[2].lower() == "pass"
            if passed and _result_passes(match[1].lower(), match[3], from_domain):
                return True
    return False


# The DNS lookup dkimpy uses for the signers' public keys (None: its own, through dnspython).
# A function `(name: bytes, timeout: int) -> bytes` answering the TXT record of `name`.
DKIM_DNS: Callable[..., bytes] | None = None
DKIM_TIMEOUT = 3  # seconds per key lookup: the listener must not stall on a slow resolver
DKIM_MAX_SIGNATURES = 5  # a mail with more is not worth more lookups


def dkim_aligned(raw: bytes, *, from_address: str) -> bool:
    """True when one of the mail's DKIM signatures verifies and its signing domain (d=) is the
    From address's domain or a parent of it (DMARC's relaxed alignment): what a receiving server
    would write as dkim=pass in Authentication-Results, checked here when no trusted server did.
    Any failure (no signature, a key not found, a broken header) is simply "not verified"."""
    import dkim

    from_domain = _domain(from_address)
    if not from_domain or b"dkim-signature" not in raw[:65536].lower():
        return False
    try:
        verifier = dkim.DKIM(raw, timeout=DKIM_TIMEOUT)
        count = sum(1 for name, _value in verifier.headers if name.lower() == b"dkim-signature")
        for index in range(min(count, DKIM_MAX_SIGNATURES)):
            kwargs = {"dnsfunc": DKIM_DNS} if DKIM_DNS is not None else {}
            if not verifier.verify(idx=index, **kwargs):
                continue
            domain = (verifier.domain or b"").decode("ascii", "replace").lower().rstrip(".")
            if domain and (from_domain == domain or from_domain.endswith("." + domain)):
                return True
    except Exception:  # dkimpy raises its own errors, DNS errors and parse errors alike
        return False
    return False


def parse_mail(
    raw: bytes,
    *,
    envelope_from: str | None = None,
    trusted_authserv_ids: Collection[str] = (),
    verify_dkim: bool = False,
) -> ParsedMail:
    """Parse `raw` (RFC 5322 bytes); raise MailParseError when it cannot be trusted."""
    try:
        msg = email.message_from_bytes(raw, policy=policy.default)
    except Exception as exc:  # the parser is lenient; this is truly broken input
        raise MailParseError(f"unparseable: {exc}") from exc
    if not isinstance(msg, EmailMessage):
        raise MailParseError("not a message")
    defects = [d for part in msg.walk() for d in part.defects]
    structural = [d for d in defects if isinstance(d, STRUCTURAL_DEFECTS)]
    if structural:
        raise MailParseError(
            "broken MIME structure: " + ", ".join(type(d).__name__ for d in structural)
        )

    from_header = _header(msg, "From") or _header(msg, "Sender")
    name, address = parseaddr(from_header)
    if not address and envelope_from and envelope_from not in {"<>"}:
        address = envelope_from
    if "@" not in address:
        raise MailParseError(f"no sender address (From: {from_header!r})")

    text_parts: list[str] = []
    html_parts: list[str] = []
    attachments: list[ParsedAttachment] = []
    for part in msg.walk():
        if part.is_multipart():
            continue
        ctype = part.get_content_type()
        disposition = (part.get_content_disposition() or "").lower()
        filename = part.get_filename()
        try:
            payload = part.get_payload(decode=True) or b""
        except Exception as exc:
            raise MailParseError(f"undecodable part {ctype}: {exc}") from exc
        if disposition == "attachment" or filename or not ctype.startswith("text/"):
            if ctype == "message/delivery-status" or ctype == "message/rfc822":
                payload = payload if payload else part.as_bytes()
            attachments.append(
                ParsedAttachment(
                    filename=clean_text(filename or f"part-{len(attachments) + 1}")[:255],
                    content_type=ctype[:120],
                    data=payload,
                )
            )
            continue
        text = clean_text(decode_bytes(payload, part.get_content_charset()))
        if ctype == "text/html":
            html_parts.append(text)
        else:
            text_parts.append(text)

    body_html = "\n".join(html_parts)
    body_text = "\n\n".join(t.strip("\n") for t in text_parts) or html_to_text(body_html)
    auth_headers = [clean_text(str(h)) for h in msg.get_all("Authentication-Results") or []]
    references = _msgids(_header(msg, "References"))
    in_reply_to = (_msgids(_header(msg, "In-Reply-To")) or [""])[0]
    return ParsedMail(
        message_id=(_msgids(_header(msg, "Message-ID")) or [""])[0][:500],
        in_reply_to=in_reply_to[:500],
        references=references[-20:],
        subject=clean_text(_header(msg, "Subject"))[:300],
        from_email=address.strip().lower()[:320],
        from_name=clean_text(name)[:200],
        to=", ".join(a for _, a in getaddresses([_header(msg, "To")]) if a)[:320],
        body_text=body_text,
        body_html=body_html,
        attachments=attachments,
        automatic_reason=automatic_reason(msg, envelope_from),
        sender_authenticated=sender_authenticated(
            auth_headers, from_address=address, trusted_authserv_ids=trusted_authserv_ids
        )
        or (verify_dkim and dkim_aligned(raw, from_address=address)),
    )
