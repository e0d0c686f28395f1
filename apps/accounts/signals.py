"""What the accounts app asks the apps above it (a Django signal: accounts imports neither
the API nor the gateway). Receivers are connected in their apps' ``AppConfig.ready()`` with
a ``dispatch_uid``.

Asked (a provider hook: ``send_robust`` returns ``[(receiver, value or exception)]``):

``revoke_credentials(sender=User, user=user)``: the user changed their password and asked
that every credential of theirs that is not the password stop working too. Each receiver
revokes its own kind through its own service (each revocation audited; a gateway key
tombstoned in Redis, so it fails at its next request in every process) and returns what it
revoked in words, e.g. "2 API tokens" (or "" for none). The API's tokens
(apps/api/tokens.py) and the gateway's keys (apps/gateway/keys.py) answer.
"""

from __future__ import annotations

from django.dispatch import Signal

revoke_credentials = Signal()
