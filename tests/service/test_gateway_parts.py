"""The gateway's small parts on their own: auth, rate limits, fault headers, settings."""

from __future__ import annotations

import time

import jwt
import pytest
from spanbudget.service.engine.settings import EngineSettings
from spanbudget.service.faults import FaultPlan, parse_delay_header
from spanbudget.service.gateway.auth import Authenticator, AuthError, key_id
from spanbudget.service.gateway.ratelimit import TokenBucketLimiter
from spanbudget.service.settings import Settings

JWT_SECRET = "unit-test-secret-" + "z" * 48


def test_api_keys_are_checked_and_only_a_key_id_comes_out() -> None:
    auth = Authenticator(["alpha-key", "beta-key"])
    principal = auth.verify("Bearer beta-key")
    assert principal.method == "api_key"
    assert principal.key_id == key_id("beta-key")
    assert "beta" not in principal.key_id
    for header in (None, "", "Bearer", "Basic beta-key", "Bearer gamma-key", "Bearer beta-key2"):
        with pytest.raises(AuthError) as caught:
            auth.verify(header)
        assert caught.value.challenge.startswith('Bearer realm="spanbudget"')


def test_auth_off_without_keys() -> None:
    auth = Authenticator([])
    assert not auth.enabled
    assert auth.verify(None).method == "none"


def test_jwt_claims_and_algorithms_are_enforced() -> None:
    auth = Authenticator(
        [], jwt_secret=JWT_SECRET, jwt_algorithms=["HS256"], jwt_audience="a", jwt_issuer="i"
    )
    now = int(time.time())
    claims = {"sub": "alice", "exp": now + 60, "aud": "a", "iss": "i"}
    principal = auth.verify("Bearer " + jwt.encode(claims, JWT_SECRET))
    assert principal.method == "jwt"
    assert principal.key_id == key_id("jwt:alice")
    bad_tokens = [
        jwt.encode({**claims, "aud": "other"}, JWT_SECRET),
        jwt.encode({**claims, "iss": "other"}, JWT_SECRET),
        jwt.encode({k: v for k, v in claims.items() if k != "exp"}, JWT_SECRET),
        jwt.encode({k: v for k, v in claims.items() if k != "iss"}, JWT_SECRET),
        jwt.encode(claims, "another-secret-" + "q" * 48),
        jwt.encode(claims, JWT_SECRET, algorithm="HS384"),
        jwt.encode(claims, None, algorithm="none"),
    ]
    for token in bad_tokens:
        with pytest.raises(AuthError):
            auth.verify(f"Bearer {token}")


def test_token_bucket_refills_at_its_rate_per_key() -> None:
    now = [100.0]
    limiter = TokenBucketLimiter(2.0, 3, clock=lambda: now[0])
    assert [limiter.acquire("a").allowed for _ in range(4)] == [True, True, True, False]
    refused = limiter.acquire("a")
    assert refused.retry_after_seconds == 1
    assert limiter.acquire("b").allowed
    now[0] += 0.5  # one token back at 2/s
    assert limiter.acquire("a").allowed
    assert not limiter.acquire("a").allowed
    now[0] += 100
    assert limiter.acquire("a").remaining == 2  # capped at the burst


def test_delay_header_parsing_keeps_gateway_keys_only_when_enabled() -> None:
    header = "retrieval=30, prompt=15,gateway=5,queue=50,bogus,prompt2=x,neg=-3"
    assert parse_delay_header(header) == {
        "retrieval": 30.0,
        "prompt": 15.0,
        "gateway": 5.0,
        "queue": 50.0,
    }
    assert dict(FaultPlan.from_header(header, enabled=True).delays_ms) == {
        "retrieval": 30.0,
        "prompt": 15.0,
        "gateway": 5.0,
    }
    assert dict(FaultPlan.from_header(header, enabled=False).delays_ms) == {}
    assert parse_delay_header("retrieval=999999") == {"retrieval": 10_000.0}


def test_default_model_is_the_one_the_default_engine_serves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("SPANBUDGET_LLM_MODEL", "SPANBUDGET_ENGINE_MODEL", "SPANBUDGET_ENGINE_PRESET"):
        monkeypatch.delenv(name, raising=False)
    assert Settings(_env_file=None).llm_model == EngineSettings().served_model()


def test_settings_come_from_env_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPANBUDGET_API_KEYS", " k1 ,k2,, ")
    monkeypatch.setenv("LLM_BASE_URL", "http://llm:8000/v1")
    monkeypatch.setenv("QDRANT_URL", "http://qdrant:6333")
    monkeypatch.setenv("SPANBUDGET_HNSW_EF", "128")
    monkeypatch.setenv("SPANBUDGET_FAULTS", "1")
    settings = Settings(_env_file=None)
    assert settings.api_keys == ("k1", "k2")
    assert settings.llm_base_url == "http://llm:8000/v1"
    assert settings.qdrant_url == "http://qdrant:6333"
    assert settings.hnsw_ef == 128
    assert settings.faults is True
    # Explicit values (CLI options) win over the environment.
    assert (
        Settings(_env_file=None, llm_base_url="http://other/v1").llm_base_url == "http://other/v1"
    )
    monkeypatch.setenv("SPANBUDGET_TOP_K", "0")
    with pytest.raises(ValueError, match="top_k"):
        Settings(_env_file=None)
