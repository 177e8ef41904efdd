"""Bearer authentication: API keys (constant time) and optional JWTs; `AuthError` becomes a
401 with its challenge. Only a key id ever leaves this module, never a key or token."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass

import jwt

from ..errors import ServiceError

__all__ = ["AuthError", "Authenticator", "Principal", "key_id"]


class AuthError(ServiceError):
    """The request is not authenticated; `challenge` goes into `WWW-Authenticate`."""

    def __init__(self, message: str, error: str = "invalid_token") -> None:
        super().__init__(message)
        self.challenge = f'Bearer realm="spanbudget", error="{error}"'


@dataclass(frozen=True)
class Principal:
    """Who made the request: `method` is api_key, jwt or none; `key_id` is safe to record."""

    method: str
    key_id: str


ANONYMOUS = Principal(method="none", key_id="anonymous")


def key_id(secret: str) -> str:
    """A stable, non-reversible name for a key, fit for spans, logs and rate-limit buckets."""
    return "key-" + hashlib.sha256(secret.encode()).hexdigest()[:12]


class Authenticator:
    """Checks `Authorization: Bearer ...` against API keys and, when configured, JWTs."""

    def __init__(
        self,
        api_keys: Sequence[str] = (),
        *,
        jwt_secret: str = "",
        jwt_algorithms: Sequence[str] = ("HS256",),
        jwt_audience: str = "spanbudget",
        jwt_issuer: str = "spanbudget",
    ) -> None:
        self._keys = [(k.encode(), key_id(k)) for k in api_keys]
        self._jwt_secret = jwt_secret
        self._jwt_algorithms = list(jwt_algorithms)
        self._jwt_audience = jwt_audience
        self._jwt_issuer = jwt_issuer

    @property
    def enabled(self) -> bool:
        return bool(self._keys or self._jwt_secret)

    def verify(self, authorization: str | None) -> Principal:
        if not self.enabled:
            return ANONYMOUS
        if not authorization:
            raise AuthError("missing bearer token", error="invalid_request")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AuthError("authorization must be 'Bearer <token>'", error="invalid_request")
        if self._jwt_secret and token.count(".") == 2:
            return self._verify_jwt(token)
        return self._verify_key(token)

    def _verify_key(self, token: str) -> Principal:
        candidate = token.encode()
        match: str | None = None
        # Compare against every key so the time taken does not reveal which one matched.
        for secret, kid in self._keys:
            if hmac.compare_digest(candidate, secret):
                match = kid
        if match is None:
            raise AuthError("invalid API key")
        return Principal(method="api_key", key_id=match)

    def _verify_jwt(self, token: str) -> Principal:
        try:
            claims = jwt.decode(
                token,
                self._jwt_secret,
                algorithms=self._jwt_algorithms,
                audience=self._jwt_audience,
                issuer=self._jwt_issuer,
                options={"require": ["exp", "aud", "iss"]},
            )
        except jwt.PyJWTError as exc:
            raise AuthError(f"invalid token: {type(exc).__name__}") from None
        subject = str(claims.get("sub", ""))
        return Principal(method="jwt", key_id=key_id("jwt:" + subject))
