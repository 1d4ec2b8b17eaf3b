"""A corpus of realistic secrets: fake, but shaped exactly as their issuers shape them.

Each entry is a lesson someone might state or an extractor might distill, with a live-looking
credential inside it. ``Secret.raw`` is the part that must never be stored, rendered or
logged; ``Secret.fragments`` are its long alphanumeric runs, which must not survive either
(a store that tokenizes or folds text could keep a run without keeping the whole).

The values come from a seeded generator, so the corpus is the same on every run and no
value is a real credential.
"""

from __future__ import annotations

import base64
import json
import random
import re
import string

import attrs

_RNG = random.Random(14)
_UPPER_DIGITS = string.ascii_uppercase + string.digits
_ALNUM = string.ascii_letters + string.digits
_HEX = "0123456789abcdef"
_B64 = string.ascii_letters + string.digits + "+/"
_URLSAFE = string.ascii_letters + string.digits + "-_"
_BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"


def _pick(alphabet: str, n: int) -> str:
    return "".join(_RNG.choice(alphabet) for _ in range(n))


def _b64url(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


@attrs.frozen
class Secret:
    kind: str
    text: str
    raw: str
    #: For a secret in disguise (split by an invisible character, fullwidth, spaced out,
    #: base64-wrapped): the token a reader recovers from it.
    hidden: str = ""

    @property
    def fragments(self) -> tuple[str, ...]:
        """The alphanumeric runs of 10 or more characters of the secret and of the token it
        hides."""
        return tuple(run for value in (self.raw, self.hidden)
                     for run in re.findall(r"[A-Za-z0-9]+", value) if len(run) >= 10)


def _fullwidth(value: str) -> str:
    return "".join(chr(ord(char) + 0xFEE0) if "!" <= char <= "~" else char for char in value)


def _disguised() -> list[tuple[str, str, str, str]]:
    """(format, text, secret as written, the token it hides): secrets a reader (or the
    renderer) recovers whole from what the text shows."""
    github = "ghp_" + _pick(_ALNUM, 36)
    aws = "AKIA" + _pick(_UPPER_DIGITS, 16)
    stripe = "sk_live_" + _pick(_ALNUM, 24)
    hugging = "hf_" + _pick(string.ascii_letters, 34)
    linear = "lin_api_" + _pick(_ALNUM, 40)
    spaced = "ghp_" + _pick(_ALNUM, 36)
    wrapped = "glpat-" + _pick(_URLSAFE, 20)
    wrapped_json = "xoxb-" + _pick(string.digits, 12) + "-" + _pick(_ALNUM, 24)
    return [
        # Rendering deletes the invisible character, so the prompt would hold the token.
        ("split_zwsp", "the mirror bot token is {s}", github[:20] + "\u200b" + github[20:],
         github),
        ("split_soft_hyphen", "the audit role uses {s}", aws[:10] + "\u00ad" + aws[10:], aws),
        ("split_word_joiner", "the billing worker uses {s}", stripe[:14] + "\u2060" + stripe[14:],
         stripe),
        ("split_zwj", "the model mirror pulls with {s}", hugging[:12] + "\u200d" + hugging[12:],
         hugging),
        ("split_nul", "the backup bot reads {s}", github[:8] + "\x00" + github[8:], github),
        ("fullwidth", "the docs bot token is {s}", _fullwidth(github), github),
        ("fullwidth", "linear key {s} for the triage bot", _fullwidth(linear), linear),
        ("space_split", "the token, spelled out: {s}", " ".join(spaced), spaced),
        ("base64", "the CI secret is stored as {s}",
         base64.b64encode(wrapped.encode()).decode(), wrapped),
        ("base64", "docker auth {s}", base64.urlsafe_b64encode(json.dumps(
            {"token": wrapped_json}).encode()).decode(), wrapped_json),
    ]


def _entries() -> list[tuple[str, str, str]]:
    """(format, text with ``{s}`` where the secret goes, secret)."""
    jwt_head = _b64url({"alg": "HS256", "typ": "JWT"})
    none_head = _b64url({"alg": "none", "typ": "JWT"})
    e = [
        ("aws_akia", "the deploy role uses access key {s} in us-east-1",
         "AKIA" + _pick(_UPPER_DIGITS, 16)),
        ("aws_asia", "temporary creds for CI: {s}", "ASIA" + _pick(_UPPER_DIGITS, 16)),
        ("aws_abia", "the billing export key id is {s}", "ABIA" + _pick(_UPPER_DIGITS, 16)),
        ("aws_acca", "use {s} for the audit account", "ACCA" + _pick(_UPPER_DIGITS, 16)),
        ("aws_secret", "aws_secret_access_key = {s}", _pick(_B64, 40)),
        ("aws_secret", "set AWS_SECRET_ACCESS_KEY={s} before terraform apply", _pick(_B64, 40)),
        ("github_pat", "the release bot token is {s}", "ghp_" + _pick(_ALNUM, 36)),
        ("github_pat", "gh auth login --with-token {s}", "gho_" + _pick(_ALNUM, 36)),
        ("github_fine", "fine-grained token for the mirror: {s}",
         "github_pat_" + _pick(_ALNUM, 22) + "_" + _pick(_ALNUM, 59)),
        ("gitlab_pat", "gitlab access: {s}", "glpat-" + _pick(_URLSAFE, 20)),
        ("gitlab_runner", "register the runner with {s}", "glrt-" + _pick(_URLSAFE, 20)),
        ("slack_bot", "slack bot token {s} posts to #deploys", "xoxb-" + "-".join(
            [_pick(string.digits, 12), _pick(string.digits, 13), _pick(_ALNUM, 24)])),
        ("slack_user", "user token: {s}", "xoxp-" + "-".join(
            [_pick(string.digits, 12), _pick(string.digits, 12), _pick(string.digits, 13),
             _pick(_HEX, 32)])),
        ("slack_refresh", "the refresh token {s} rotates every 12h",
         "xoxe-1-" + _pick(_ALNUM, 140)),
        ("slack_refresh", "rotated: {s}", "xoxe.xoxp-1-" + _pick(_ALNUM, 130)),
        ("slack_webhook", "alerts go to https://hooks.slack.com/services/{s}",
         "T" + _pick(_UPPER_DIGITS, 8) + "/B" + _pick(_UPPER_DIGITS, 10) + "/" + _pick(_ALNUM, 24)),
        ("openai", "OPENAI key for evals {s}",
         "sk-proj-" + _pick(_URLSAFE, 48) + "T3BlbkFJ" + _pick(_URLSAFE, 48)),
        ("anthropic", "the eval harness reads {s}", "sk-ant-api03-" + _pick(_URLSAFE, 93) + "AA"),
        ("stripe", "stripe live key {s} (rotate quarterly)", "sk_live_" + _pick(_ALNUM, 24)),
        ("stripe", "restricted key {s} for the webhook worker", "rk_live_" + _pick(_ALNUM, 24)),
        ("google_api", "maps key {s}", "AIza" + _pick(_URLSAFE, 35)),
        ("jwt", "the service token is {s}", jwt_head + "." + _b64url(
            {"sub": "svc-deploy", "iat": 1767225600}) + "." + _pick(_URLSAFE, 43)),
        ("jwt_unsigned", "an unsigned token {s} still authenticates on staging",
         none_head + "." + _b64url({"sub": "admin", "role": "root"}) + "."),
        ("npm", "publish with npm token {s}", "npm_" + _pick(_ALNUM, 36)),
        ("npm", "//registry.npmjs.org/:_authToken={s}", "npm_" + _pick(_ALNUM, 36)),
        ("npm_legacy", "//npm.acme.dev/:_authToken={s}", "-".join(
            _pick(_HEX, n) for n in (8, 4, 4, 4, 12))),
        ("pypi", "twine upload -u __token__ -p {s}", "pypi-AgEIcHlwaS5vcmc" + _pick(_URLSAFE, 140)),
        ("huggingface", "HF hub token {s} for private models",
         "hf_" + _pick(string.ascii_letters, 34)),
        ("huggingface", "huggingface-cli login --token {s}",
         "hf_" + _pick(string.ascii_letters, 34)),
        ("sendgrid", "mail goes through SendGrid with {s}",
         "SG." + _pick(_URLSAFE, 22) + "." + _pick(_URLSAFE, 43)),
        ("digitalocean", "doctl auth init -t {s}", "dop_v1_" + _pick(_HEX, 64)),
        ("digitalocean", "the droplet oauth token {s}", "doo_v1_" + _pick(_HEX, 64)),
        ("vault", "vault login {s}", "hvs." + _pick(_URLSAFE, 91)),
        ("vault", "batch token {s} expires hourly", "hvb." + _pick(_URLSAFE, 120)),
        ("age", "the sops key is {s}", "AGE-SECRET-KEY-1" + _pick(_BECH32, 58)),
        ("telegram", "the telegram bot answers with {s}",
         _pick(string.digits, 10) + ":AA" + _pick(_URLSAFE, 33)),
        ("databricks", "databricks workspace token {s}", "dapi" + _pick(_HEX, 32)),
        ("shopify", "the store admin token is {s}", "shpat_" + _pick(_HEX, 32)),
        ("shopify", "shared secret {s}", "shpss_" + _pick(_HEX, 32)),
        ("azure_storage", "DefaultEndpointsProtocol=https;AccountName=acmelogs;"
         "AccountKey={s};EndpointSuffix=core.windows.net",
         _pick(_B64, 86) + "=="),
        ("db_pass", "the staging database uses DB_PASS={s}", _pick(_ALNUM, 18)),
        ("pwd", "connection string Server=db1;Uid=app;pwd={s};", _pick(_ALNUM, 16)),
        ("credentials", "export CREDENTIALS={s}", _pick(_ALNUM, 24)),
        ("password", "mysql -u root, password: {s}", "Tr0ub4dor" + _pick(_ALNUM, 6)),
        ("password", 'the config has "password": "{s}"', "c0rrect-h0rse-" + _pick(_ALNUM, 8)),
        ("curl_user", "curl -u deploy:{s} https://ci.acme.dev/api", _pick(_ALNUM, 20)),
        ("curl_user", "curl --user admin:{s} -X POST https://nexus.acme.dev", _pick(_ALNUM, 14)),
        ("url_password", "postgres://app:{s}@db.acme.internal:5432/app",
         _pick(_ALNUM, 6) + "@" + _pick(_ALNUM, 8)),
        ("url_password", "redis://default:{s}@cache.acme.internal:6379",
         _pick(_ALNUM, 7) + "/" + _pick(_ALNUM, 9)),
        ("url_password", "https://bot:{s}@git.acme.dev/acme/api.git", _pick(_ALNUM, 22)),
        ("private_key", "the deploy key:\n-----BEGIN OPENSSH PRIVATE KEY-----\n{s}\n"
         "-----END OPENSSH PRIVATE KEY-----",
         "b3BlbnNzaC1rZXktdjEAAAAA" + _pick(_B64, 46) + "\n" + _pick(_B64, 70)),
        ("private_key", "-----BEGIN RSA PRIVATE KEY-----\n{s}\n-----END RSA PRIVATE KEY-----",
         "MIIEowIBAAKCAQEA" + _pick(_B64, 48) + "\n" + _pick(_B64, 64)),
        ("bearer", "call it with Authorization: Bearer {s}", _pick(_URLSAFE, 40)),
        ("basic", "Authorization: Basic {s}", base64.b64encode(
            ("ci:" + _pick(_ALNUM, 16)).encode()).decode()),
        ("discord", "discord bot token {s}", "M" + _pick(_ALNUM, 23) + "." + _pick(_URLSAFE, 6)
         + "." + _pick(_URLSAFE, 27)),
        ("twilio", "twilio api key {s}", "SK" + _pick(string.ascii_lowercase + string.digits, 32)),
        ("mailchimp", "mailchimp key {s}", _pick(_HEX, 32) + "-us14"),
        ("square", "square oauth secret {s}", "sq0csp-" + _pick(_URLSAFE, 43)),
        ("entropy_env", "SESSION_SIGNING_SALT={s}", _pick(_ALNUM, 32)),
        ("entropy_quoted", 'webhook_signing = "{s}"', _pick(_ALNUM, 28)),
        ("entropy_yaml", "cookie_seed: '{s}'", _pick(_B64, 40)),
        ("entropy_hex", "ENCRYPTION_HEX={s}", _pick(_HEX, 64)),
        ("generic_token", "the api token = {s}", _pick(_ALNUM, 30)),
        ("generic_secret", "client_secret: {s}", _pick(_URLSAFE, 40)),
        # Formats the rule sets have no rule for, or name only in a file's syntax.
        ("aws_secret_prose", "the AWS secret key is {s}", _pick(_B64, 40)),
        ("aws_secret_prose", "aws: AKIA" + _pick(_UPPER_DIGITS, 16) + " with {s}",
         _pick(_B64, 40)),
        ("google_oauth", "the OAuth client secret is {s}", "GOCSPX-" + _pick(_URLSAFE, 28)),
        ("password_is", "the admin password is {s}", "Tr0ub4dor" + _pick(_ALNUM, 5)),
        ("password_is", "the wifi password is '{s}'", "s3cure-" + _pick(_ALNUM, 8)),
        ("pass_colon", "user: admin, pass: {s}", "Qw3rty" + _pick(_ALNUM, 8)),
        ("mysql", "mysql -u root -p{s} orders < dump.sql", _pick(_ALNUM, 14)),
        ("mysql", "mysqldump -h db1 -uapp -p'{s}' app", _pick(_ALNUM, 12)),
        ("sshpass", "sshpass -p {s} ssh deploy@bastion.acme.internal", _pick(_ALNUM, 14)),
        ("netrc", "machine api.acme.dev login deploy password {s}", _pick(_ALNUM, 16)),
        ("netrc", "~/.netrc holds:\nmachine git.acme.dev\n  login ci\n  password {s}\n",
         _pick(_ALNUM, 16)),
        ("linear", "linear api key {s}", "lin_api_" + _pick(_ALNUM, 40)),
        ("sentry_dsn", "errors go to https://{s}@o450123.ingest.sentry.io/5501234",
         _pick(_HEX, 32)),
    ]
    return e


CORPUS: tuple[Secret, ...] = (
    *(Secret(kind, text.replace("{s}", raw), raw) for kind, text, raw in _entries()),
    *(Secret(kind, text.replace("{s}", raw), raw, hidden)
      for kind, text, raw, hidden in _disguised()),
)

FORMATS: frozenset[str] = frozenset(secret.kind for secret in CORPUS)

#: Ordinary lessons that must come out of redaction exactly as they went in.
ORDINARY: tuple[str, ...] = (
    "run `pytest -q -p no:cacheprovider` before pushing",
    "the api builds with `make build` and ships from /srv/acme/api/releases",
    "pin ruff to 0.5.7; v1.2.3 of the client broke the retry loop",
    "the fix landed in abc123 and was reverted in 3f9a2c1",
    "git sha 4f2a9c1e8b7d6a5f3e2d1c0b9a8f7e6d5c4b3a2f introduced the regression",
    "use python 3.12 and node 20.11.1 in CI",
    "set LOG_LEVEL=debug and RETRIES=3 when reproducing",
    "the secret store is Vault; ask #platform for access",
    "passwords are rotated by the platform team every 90 days",
    "set DB_PASSWORD=$DB_PASSWORD from the environment, never inline",
    "the bastion is bastion.acme.internal on port 2222",
    "PYTHONPATH=/work/api/src is needed for the scripts",
    "docs live at https://docs.acme.dev/api/v2/",
    "max_tokens=4096 is the ceiling for the summarizer",
    "the user id is U02ABCDEF and the channel id is C01234567",
    "timeouts: connect=5s read=30s",
    "key files are in ~/.ssh; never commit them",
    "image tag acme/api:2024.11.3-rc1 is the last good build",
    "the bisect ended at commit=9c1e8b7d6a5f3e2d1c0b9a8f7e6d5c4b3a2f4f2a",
    "the nightly job is named rebuild-search-index-nightly-eu",
    "curl -u $CI_USER:$CI_TOKEN https://ci.acme.dev/api/health",
    "git push -u origin main, then ssh -p 2222 deploy@bastion.acme.internal",
    "profiles live at https://medium.com:443/@acme/post",
    "image: ghcr.io/acme/api:sha-4f2a9c1 with digest "
    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "build id=7c9e6679-7425-40de-944b-e07fc1f90ae7 is the one QA signed off",
    "TestUserRegistrationFlow_WithExpiredToken fails on CI; python: 3.12.1, pydantic: 2.5.3",
    "docker run -e POSTGRES_PASSWORD=$PG_PASS postgres:16",
    # Near the words the prose rules read, but no secret.
    "the password is stored in Vault and rotated every 90 days",
    "the password is sha256-hashed; the api key is per-tenant",
    "the token is base64-encoded and expires after 3600s",
    "the session token is base64 encoded; the password is argon2id hashed",
    "the api key is 32bytes, the access token is RS256 signed, api key v2beta1 endpoints",
    "password policy: 12 characters, one digit; the access token lifetime is 1h",
    "pytest summary: pass: 120, fail: 3; pass the v2 flag to the runner",
    "the secret key is v1.2.3-rc1 compatible",
    "mysql -u root -p orders prompts for the password; ssh -p 2222 deploy@bastion",
    "sshpass -f ~/.pw ssh -p 2222 deploy@bastion",
    "sshpass -p $SSH_PASS ssh deploy@bastion, mysql -uroot -p$MYSQL_PWD",
    "login with your SSO account; password reset links expire in 24h",
    "aws s3 sync ./build s3://acme-site --delete; AWS region is us-east-1",
    "ssh://git@github.com/acme/api.git and https://deploy@ci.acme.dev/job/42",
    "the spaced letters a b c d e f g h i j k l m n o p q r are the alphabet",
    "base64 of hello world is aGVsbG8gd29ybGQgaGVsbG8gd29ybGQ=",
    "日本語のテキスト：ｶﾀｶﾅと全角（ＡＢＣ）をそのまま残す",
)
