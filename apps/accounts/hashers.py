"""The portal's password hasher: Argon2id with parameters sized for a login under 300 ms.

Django's default (PBKDF2-SHA256, 1,000,000 iterations) spends ~200 ms of pure CPU per check on
an idle core here, two to three times that on a loaded one, and is not memory-hard; Django's own
Argon2 defaults (100 MiB, 2 passes, 8 lanes) cost about as much. OWASP's first recommendation for
Argon2id is 46 MiB and one pass: every guess costs an attacker 46 MiB of memory, which GPUs and
ASICs cannot spread thinly the way they do PBKDF2. Two lanes let one check use both cores of a
small web host (the attacker's total work is the same). Hashes of another hasher or with other
parameters are rewritten at the next login (Django's check_password with must_update()); the
figures are in docs/BENCHMARKS.md ("Sign-in").
"""

from __future__ import annotations

from django.contrib.auth.hashers import Argon2PasswordHasher


class PortalArgon2PasswordHasher(Argon2PasswordHasher):
    """Argon2id, 46 MiB, 1 pass, 2 lanes (the same "argon2" algorithm name as Django's)."""

    time_cost = 1
    memory_cost = 47104  # KiB: 46 MiB
    parallelism = 2
