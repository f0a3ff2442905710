"""The Keystone face's rules without HTTP: password hashes, signed tokens, request parsing, failed-attempt limits."""

from __future__ import annotations

import pytest

from cloudnet.errors import BadRequest, NotAuthenticated
from cloudnet.services.identity import keystone, passwords

HASH = passwords.hash_password("right horse")


def test_password_hash_verifies_only_the_password() -> None:
    assert HASH.startswith("scrypt$") and "right horse" not in HASH
    assert passwords.verify_password("right horse", HASH)
    assert not passwords.verify_password("right horsf", HASH)
    assert not passwords.verify_password("", HASH)
    assert not passwords.verify_password("x" * (passwords.MAX_PASSWORD + 1), HASH)
    assert not passwords.verify_password("right horse", None)  # an unknown user (same cost, never a match)
    assert passwords.hash_password("right horse") != HASH  # salted


@pytest.mark.parametrize("bad", ["plain-text", "scrypt$3$8$1$AAAAAAAAAAA$" + "A" * 43, "scrypt$16384$8$1$AA$AA",
                                 "scrypt$1073741824$8$1$AAAAAAAAAAA$" + "A" * 43, ""])  # fmt: skip
def test_malformed_or_unaffordable_hashes_are_refused_when_read(bad: str) -> None:
    with pytest.raises(ValueError):
        keystone.parse_users({"u": {"password_hash": bad, "projects": {"p": "member"}}})


@pytest.mark.parametrize("entry", [{"projects": {"p": "member"}}, {"password_hash": HASH, "projects": {}},
                                   {"password_hash": HASH, "projects": {"p": "root"}},
                                   {"password_hash": HASH, "projects": {"p": "member"}, "default_project": "q"},
                                   {"password_hash": HASH, "projects": {"": "member"}}, "x"])  # fmt: skip
def test_malformed_users_are_refused(entry: object) -> None:
    with pytest.raises(ValueError):
        keystone.parse_users({"u": entry})


def test_default_project_is_the_only_one() -> None:
    users = keystone.parse_users({"a": {"password_hash": HASH, "projects": {"p": "member"}},
                                  "b": {"password_hash": HASH, "projects": {"p": "member", "q": "admin"}}})  # fmt: skip
    assert users["a"].default_project == "p" and users["b"].default_project is None


def test_tokens_are_signed_bounded_and_expire() -> None:
    signer = keystone.TokenSigner("secret", ttl=60)
    token, issued = signer.issue("alice", "p", ("password",), now=1000)
    assert signer.verify(token, now=1059) == issued
    assert signer.verify(token, now=1060) is None  # expired
    assert keystone.TokenSigner("other secret").verify(token, now=1000) is None
    payload, mac = token[len(keystone.PREFIX) :].split(".")
    forged = keystone.PREFIX + payload.replace(payload[10], "A" if payload[10] != "A" else "B", 1) + "." + mac
    assert signer.verify(forged, now=1000) is None
    assert signer.verify(token + "x" * keystone.MAX_TOKEN, now=1000) is None
    assert signer.verify("cnk1.", now=1000) is None and signer.verify("admin", now=1000) is None
    # a token method never extends a token's life
    _token, again = signer.issue("alice", "q", ("token",), expires_at=1030, now=1010)
    assert again.expires_at == 1030


def test_role_is_read_from_the_users_at_each_use() -> None:
    users = keystone.parse_users({"alice": {"password_hash": HASH, "projects": {"p": "admin"}}})
    _token, issued = keystone.TokenSigner("s").issue("alice", "p", ("password",))
    assert keystone.role_of(users, issued) == "admin"
    assert keystone.role_of({}, issued) is None
    _token, unscoped = keystone.TokenSigner("s").issue("alice", None, ("password",))
    assert keystone.role_of(users, unscoped) is None


def _password_body(**scope: object) -> dict[str, object]:
    auth: dict[str, object] = {"identity": {"methods": ["password"], "password": {"user": {
        "name": "alice", "domain": {"name": "Default"}, "password": "pw"}}}}  # fmt: skip
    if scope:
        auth["scope"] = scope
    return {"auth": auth}


def test_parse_request() -> None:
    req = keystone.parse_request(_password_body(project={"name": "p", "domain": {"id": "default"}}))
    assert (req.user, req.password, req.project, req.methods) == ("alice", "pw", "p", ("password",))
    token = keystone.parse_request({"auth": {"identity": {"methods": ["token"], "token": {"id": "t"}}}})
    assert token.token == "t" and token.user is None


@pytest.mark.parametrize("body", [None, [], {"auth": "x"}, {"auth": {"identity": {"methods": ["password"]}}},
                                  {"auth": {"identity": {"methods": ["password"], "password": {"user": {
                                      "name": "a" * 256, "password": "pw"}}}}},
                                  {"auth": {"identity": {"methods": ["token"], "token": {"id": 5}}}}])  # fmt: skip
def test_malformed_requests_are_400(body: object) -> None:
    with pytest.raises(BadRequest):
        keystone.parse_request(body)


@pytest.mark.parametrize("body", [{"auth": {"identity": {"methods": ["totp"]}}},
                                  _password_body(domain={"id": "default"}),
                                  _password_body(project={"name": "p", "domain": {"name": "Other"}})])  # fmt: skip
def test_what_cloudnet_does_not_have_is_401(body: object) -> None:
    with pytest.raises(NotAuthenticated):
        keystone.parse_request(body)


def test_scope_must_be_one_of_the_users_projects() -> None:
    user = keystone.parse_users({"u": {"password_hash": HASH, "projects": {"p": "member", "q": "admin"},
                                       "default_project": "q"}})["u"]  # fmt: skip
    assert keystone.scope_of(user, keystone.AuthRequest(("password",), project="p"), None) == "p"
    assert keystone.scope_of(user, keystone.AuthRequest(("password",)), None) == "q"
    assert keystone.scope_of(user, keystone.AuthRequest(("token",)), "p") == "p"
    assert keystone.scope_of(user, keystone.AuthRequest(("password",), unscoped=True), None) is None
    with pytest.raises(NotAuthenticated):
        keystone.scope_of(user, keystone.AuthRequest(("password",), project="other"), None)


def test_failure_limiter_blocks_then_forgets() -> None:
    limiter = keystone.FailureLimiter(limit=3, window=60, max_keys=2)
    for t in (0, 1, 2):
        limiter.check("alice", now=t)
        limiter.failed("alice", now=t)
    with pytest.raises(keystone.TooManyAttempts) as caught:
        limiter.check("alice", now=10)
    assert caught.value.retry_after == 50 and caught.value.status == 429
    limiter.check("alice", now=60.5)  # the oldest failure aged out
    limiter.check("bob", now=10)  # other keys are not held back
    limiter.failed("bob", now=11)
    limiter.failed("carol", now=12)  # memory is bounded: alice, least recently failed, is forgotten
    limiter.check("alice", now=13)
