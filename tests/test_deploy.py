"""The deployment files: Dockerfile, compose files, the container entrypoint and healthcheck.

No Docker engine runs here, so images are never built in the tests. Instead: the compose
files are validated against the Compose Specification's JSON schema (vendored in
tests/data/compose-spec/, offline) after compose-style interpolation and merging; what the
schema cannot see (references between services, volumes, Dockerfile targets, the proxy's
upstream) is checked by hand; every `ragmt` command line the files name must parse in the
real CLI, and every RAGMT_* variable must be a settings field; and the entrypoint and
healthcheck scripts run outside Docker against a real Redis (`redis_url`: a private
redis-server, or the one on 127.0.0.1:6379) and local sockets.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import typer.main
import yaml

from service.cli import app
from service.settings import Settings
from tests.redis_server import has_redis_server

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
COMPOSE_CPU = ROOT / "docker-compose.cpu.yml"
DOCKERFILE = ROOT / "Dockerfile"
ENTRYPOINT = ROOT / "docker/entrypoint.sh"
HEALTHCHECK = ROOT / "docker/healthcheck.py"
NGINX = ROOT / "docker/nginx.conf"
SCHEMA = ROOT / "tests/data/compose-spec/compose-spec.json"
ADMIN_ENV = {"RAGMT_ADMIN_KEY": "test-admin-key"}


# --- compose files: loading, interpolation, merging ----------------------------------------


class Reset:
    """A `!reset` value of an override file: replaces what the files before it set."""

    def __init__(self, value: Any) -> None:
        self.value = value


class ComposeLoader(yaml.SafeLoader):
    """YAML with Compose's merge tags (`!reset`, `!override`)."""


def _reset(loader: ComposeLoader, node: yaml.Node) -> Reset:
    if isinstance(node, yaml.SequenceNode):
        return Reset(loader.construct_sequence(node))
    if isinstance(node, yaml.MappingNode):
        return Reset(loader.construct_mapping(node))
    return Reset(None)


ComposeLoader.add_constructor("!reset", _reset)
ComposeLoader.add_constructor("!override", _reset)  # the same for our purposes: replace


def load(path: Path) -> dict[str, Any]:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=ComposeLoader)


class MissingVariable(Exception):
    pass


_VAR = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
    r"|(?P<named>[A-Za-z_][A-Za-z0-9_]*)|(?P<invalid>))"
)


def interpolate_str(text: str, env: dict[str, str]) -> str:
    """Compose's interpolation: $VAR, ${VAR}, ${VAR:-default}, ${VAR-default},
    ${VAR:?error}, ${VAR?error}, ${VAR:+alt}, ${VAR+alt}, and $$ for a literal $."""

    def sub(m: re.Match[str]) -> str:
        if m.group("escaped"):
            return "$"
        if m.group("invalid") is not None:
            raise ValueError(f"invalid interpolation in {text!r}")
        name = m.group("braced") or m.group("named")
        op, arg = m.group("op"), m.group("arg") or ""
        value = env.get(name)
        empty = value is None or (op is not None and op.startswith(":") and value == "")
        if op in (":-", "-"):
            return arg if empty else value
        if op in (":?", "?"):
            if empty:
                raise MissingVariable(f"required variable {name} is missing a value: {arg}")
            return value
        if op in (":+", "+"):
            return "" if empty else arg
        return value or ""

    return _VAR.sub(sub, text)


def interpolate(node: Any, env: dict[str, str]) -> Any:
    """Interpolate every string value (not keys), as Compose does before validating."""
    if isinstance(node, dict):
        return {k: interpolate(v, env) for k, v in node.items()}
    if isinstance(node, list):
        return [interpolate(v, env) for v in node]
    if isinstance(node, Reset):
        return Reset(interpolate(node.value, env))
    if isinstance(node, str):
        return interpolate_str(node, env)
    return node


def strip_tags(node: Any) -> Any:
    """One file alone, as the schema sees it: a `!reset` value is just its value."""
    if isinstance(node, Reset):
        return strip_tags(node.value)
    if isinstance(node, dict):
        return {k: strip_tags(v) for k, v in node.items()}
    if isinstance(node, list):
        return [strip_tags(v) for v in node]
    return node


_REPLACED = {"command", "entrypoint", "test"}  # merged by replacement, not appended


def merge(base: Any, over: Any, key: str = "") -> Any:
    """Compose's merge of an override file into a base (mappings merge, sequences append)."""
    if isinstance(over, Reset):
        return strip_tags(over.value)
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = merge(base[k], v, k) if k in base else strip_tags(v)
        return out
    if isinstance(base, list) and isinstance(over, list) and key not in _REPLACED:
        return base + [v for v in strip_tags(over) if v not in base]
    return strip_tags(over)


def config(*paths: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """What `docker compose -f ... config` would build from the files (no engine needed)."""
    env = dict(ADMIN_ENV if env is None else env)
    model: Any = {}
    for path in paths:
        model = merge(model, interpolate(load(path), env))
    return strip_tags(model)


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def schema_errors(validator: jsonschema.Draft202012Validator, doc: Any) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)
    ]


@pytest.fixture(scope="module")
def gpu() -> dict[str, Any]:
    return config(COMPOSE)


@pytest.fixture(scope="module")
def cpu() -> dict[str, Any]:
    return config(COMPOSE, COMPOSE_CPU)


# --- Dockerfile parsing ---------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        if full:
            word, _, rest = full.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages() -> dict[str, list[tuple[str, str]]]:
    """Stage name -> its instructions (FROM first), in file order."""
    out: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for word, rest in dockerfile_instructions():
        if word == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest, flags=re.I)
            assert m and m.group(2), f"unnamed stage: FROM {rest}"
            current = out.setdefault(m.group(2), [])
        if current is not None:
            current.append((word, rest))
    return out


def global_args() -> dict[str, str]:
    args = {}
    for word, rest in dockerfile_instructions():
        if word == "FROM":
            break
        if word == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            args[name] = value
    return args


# --- compose: the specification ------------------------------------------------------------


@pytest.mark.parametrize("path", [COMPOSE, COMPOSE_CPU], ids=lambda p: p.name)
def test_each_compose_file_is_valid_against_the_compose_spec(
    validator: jsonschema.Draft202012Validator, path: Path
) -> None:
    raw = strip_tags(load(path))
    assert schema_errors(validator, raw) == []
    assert schema_errors(validator, strip_tags(interpolate(load(path), ADMIN_ENV))) == []


def test_merged_configurations_are_valid(
    validator: jsonschema.Draft202012Validator, gpu: dict[str, Any], cpu: dict[str, Any]
) -> None:
    assert schema_errors(validator, gpu) == []
    assert schema_errors(validator, cpu) == []


def test_the_validation_can_fail(validator: jsonschema.Draft202012Validator) -> None:
    doc = config(COMPOSE)
    doc["services"]["api"]["deploy"]["resources"]["reservations"]["devices"][0]["gpus"] = 1
    doc["services"]["redis"]["healthcheck"]["interval"] = ["5s"]
    errors = schema_errors(validator, doc)
    assert any("devices/0" in e and "gpus" in e for e in errors), errors
    assert any("healthcheck/interval" in e for e in errors), errors


def test_interpolation_helper_follows_compose() -> None:
    env = {"SET": "x", "EMPTY": ""}
    assert interpolate_str("$$SET ${SET} $SET ${NOPE:-d} ${EMPTY:-d} ${EMPTY-d}", env) == (
        "$SET x x d d "
    )
    assert interpolate_str("${SET:+alt}${NOPE:+alt}", env) == "alt"
    with pytest.raises(MissingVariable, match="NOPE"):
        interpolate_str("${NOPE:?say why}", env)
    with pytest.raises(MissingVariable, match="EMPTY"):
        interpolate_str("${EMPTY:?say why}", env)


def _compose_cli() -> tuple[list[str], tuple[int, ...]] | None:
    """A Compose CLI to ask as well, if this machine has one: `docker compose` (v2) or
    Debian's `docker-compose` (v1.29, Python; it needs no engine for `config`)."""
    for argv in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(argv[0]) is None:
            continue
        done = subprocess.run(
            [*argv, "version", "--short"], capture_output=True, text=True, timeout=60
        )
        m = re.match(r"v?(\d+)\.(\d+)", done.stdout.strip())
        if done.returncode == 0 and m:
            return argv, (int(m.group(1)), int(m.group(2)))
    return None


@pytest.mark.system
def test_compose_cli_config_agrees_when_one_is_installed(tmp_path: Path) -> None:
    """A second opinion beside the schema (skipped where no Compose CLI is installed)."""
    cli = _compose_cli()
    if cli is None:
        pytest.skip("no docker compose / docker-compose on this machine")
    argv, version = cli
    sets = [[COMPOSE]]
    if version >= (2, 24):  # `!reset` in the CPU override needs Compose v2
        sets.append([COMPOSE, COMPOSE_CPU])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGMT_", "COMPOSE_"))}
    for files in sets:
        cmd = [*argv, "--project-directory", str(ROOT)]
        cmd += [a for f in files for a in ("-f", str(f))] + ["config", "-q"]
        ok = subprocess.run(cmd, env={**env, **ADMIN_ENV}, capture_output=True, text=True)
        assert ok.returncode == 0, ok.stderr
        unset = subprocess.run(cmd, env=env, capture_output=True, text=True)
        assert unset.returncode != 0 and "RAGMT_ADMIN_KEY" in unset.stderr


# --- compose: what the schema cannot see ----------------------------------------------------


@pytest.mark.parametrize("variant", ["gpu", "cpu"])
def test_references_between_services_volumes_and_files_resolve(
    variant: str, request: pytest.FixtureRequest
) -> None:
    doc = request.getfixturevalue(variant)
    services, volumes = doc["services"], doc.get("volumes", {})
    dockerfile_stages = stages()
    for name, svc in services.items():
        deps = svc.get("depends_on", {})
        for dep in deps if isinstance(deps, list) else deps.keys():
            assert dep in services, f"{name} depends on undefined service {dep}"
        for mount in svc.get("volumes", []):
            source = mount.split(":")[0]
            if source.startswith((".", "/")):
                assert (ROOT / source).exists(), f"{name}: bind source {source} missing"
            else:
                assert source in volumes, f"{name}: volume {source} is not declared"
        if "build" in svc:
            build = svc["build"]
            assert (ROOT / build["context"] / build.get("dockerfile", "Dockerfile")).is_file()
            assert build["target"] in dockerfile_stages, f"{name}: no stage {build['target']}"
            assert svc["image"] == f"ragmt:{build['target']}", f"{name}: image tag vs target"


def test_redis_evicts_only_keys_with_ttls_and_has_a_healthcheck(gpu: dict[str, Any]) -> None:
    redis = gpu["services"]["redis"]
    cmd = redis["command"]
    assert cmd[0] == "redis-server"
    options = dict(zip(cmd[1::2], cmd[2::2], strict=True))
    # volatile-*: only keys with a TTL (the cache, rate windows) are candidates for eviction;
    # an allkeys-* policy could evict the registry or a job.
    assert options["--maxmemory-policy"] in ("volatile-lru", "volatile-lfu", "volatile-ttl")
    assert re.fullmatch(r"\d+[kmg]b", options["--maxmemory"]), options["--maxmemory"]
    assert options["--appendonly"] == "yes"  # registry and jobs outlive a Redis restart
    assert "redis-cli ping" in " ".join(redis["healthcheck"]["test"])


def _env(svc: dict[str, Any]) -> dict[str, str]:
    env = svc.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return env


def test_api_gpu_reservation_and_its_cpu_variant(gpu: dict[str, Any], cpu: dict[str, Any]) -> None:
    api = gpu["services"]["api"]
    devices = api["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert api["build"]["target"] == "gpu" and _env(api)["RAGMT_DEVICE"] == "cuda"

    api_cpu = cpu["services"]["api"]
    assert api_cpu["deploy"]["resources"]["reservations"].get("devices") in (None, [])
    assert api_cpu["build"]["target"] == "cpu" and _env(api_cpu)["RAGMT_DEVICE"] == "cpu"
    assert cpu["services"]["index-builder"]["build"]["target"] == "cpu"
    # Everything else is the same deployment.
    assert set(cpu["services"]) == set(gpu["services"])
    for key in ("command", "volumes", "depends_on", "expose"):
        assert api_cpu[key] == api[key], key
    assert {k: v for k, v in _env(api_cpu).items() if k != "RAGMT_DEVICE"} == {
        k: v for k, v in _env(api).items() if k != "RAGMT_DEVICE"
    }


@pytest.mark.parametrize("service", ["api", "index-builder"])
def test_ragmt_services_wait_for_a_healthy_redis(gpu: dict[str, Any], service: str) -> None:
    svc = gpu["services"][service]
    assert svc["depends_on"]["redis"]["condition"] == "service_healthy"
    assert _env(svc)["RAGMT_REDIS_URL"] == "redis://redis:6379/0"


def test_admin_key_comes_from_the_environment_and_is_required() -> None:
    raw = load(COMPOSE)["services"]["api"]["environment"]["RAGMT_ADMIN_KEY"]
    assert re.fullmatch(r"\$\{RAGMT_ADMIN_KEY:\?[^}]+\}", raw), raw
    for env in ({}, {"RAGMT_ADMIN_KEY": ""}):
        with pytest.raises(MissingVariable, match="RAGMT_ADMIN_KEY"):
            config(COMPOSE, env=env)
    assert _env(config(COMPOSE)["services"]["api"])["RAGMT_ADMIN_KEY"] == "test-admin-key"


def test_api_scales_behind_the_proxy(gpu: dict[str, Any]) -> None:
    """`docker compose up --scale api=3`: no replica claims a host port or a fixed name;
    the proxy publishes one port and resolves `api` to every replica."""
    services = gpu["services"]
    api = services["api"]
    assert "ports" not in api and "container_name" not in api
    published = [s for s in services.values() if s.get("ports")]
    assert published == [services["proxy"]]
    host, _, target = services["proxy"]["ports"][0].rpartition(":")
    assert host == "8000" and target == "8080"

    conf = NGINX.read_text(encoding="utf-8")
    conf = "\n".join(line.split("#")[0] for line in conf.splitlines())
    assert re.search(r"\blisten\s+8080;", conf)
    upstream = re.search(r"upstream\s+(\w+)\s*\{([^}]*)\}", conf)
    assert upstream, "no upstream block"
    name, body = upstream.groups()
    image_env = dict(kv.split("=", 1) for w, r in stages()["gpu"] if w == "ENV" for kv in r.split())
    port = _env(api).get("RAGMT_PORT", image_env["RAGMT_PORT"])
    assert api["expose"] == [port]
    assert re.search(rf"\bserver\s+api:{port}\s+resolve;", body)
    assert re.search(r"\bzone\s+\w+", body)  # `resolve` needs a shared-memory zone
    assert re.search(r"\bresolver\s+127\.0\.0\.11\b", conf)  # Docker's embedded DNS
    assert re.search(rf"\bproxy_pass\s+http://{name};", conf)
    # Uploads pass the proxy: its body limit is not below the service's own.
    size = re.search(r"client_max_body_size\s+(\d+)m;", conf)
    assert size and int(size.group(1)) * 2**20 >= Settings().max_upload_bytes
    # The proxy's stable version with `server ... resolve` in open-source nginx is 1.28.
    major, minor = map(int, re.search(r"nginx:(\d+)\.(\d+)", services["proxy"]["image"]).groups())
    assert (major, minor) >= (1, 28)


def test_index_builder_is_the_worker_on_the_shared_stores_volume(gpu: dict[str, Any]) -> None:
    api, builder = gpu["services"]["api"], gpu["services"]["index-builder"]
    assert builder["command"] == ["ragmt", "worker"]
    assert "deploy" not in builder  # no GPU: IDF stores are built on the CPU
    assert builder["healthcheck"] == {"disable": True}  # the image's /livez check has no server
    assert _env(api)["RAGMT_RUN_WORKER"] == "false"  # builds happen here, not in the replicas
    assert builder["volumes"] == api["volumes"]
    volume, _, target = api["volumes"][0].partition(":")
    assert volume in gpu["volumes"]
    for svc in (api, builder):
        assert _env(svc)["RAGMT_STORES_DIR"].startswith(target.rstrip("/") + "/")
    assert _env(api)["RAGMT_STORES_DIR"] == _env(builder)["RAGMT_STORES_DIR"]


# --- commands and variables named in the files exist -----------------------------------------


def _readme_deploy_section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"^## Deploy with Docker Compose\n(.*?)(?=^## )", text, flags=re.S | re.M)
    assert m, "README has no '## Deploy with Docker Compose' section"
    return m.group(1)


def _shell_commands(text: str) -> list[list[str]]:
    """Command lines of shell text (comments dropped, continuations joined), as argv lists."""
    text = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in text.splitlines():
        line = line.split(" #")[0].strip()
        if line and not line.startswith("#"):
            for part in re.split(r"\s*(?:&&|\|\||;|\|)\s*", line):
                out.append(shlex.split(part))
    return out


def ragmt_command_lines() -> dict[str, list[str]]:
    """Every `ragmt ...` argv the deployment files and the README's deploy section run."""
    found: dict[str, list[str]] = {}

    def add(where: str, argv: list[str]) -> None:
        if "ragmt" in argv:
            found[f"{where}: {shlex.join(argv)}"] = argv[argv.index("ragmt") + 1 :]

    for word, rest in dockerfile_instructions():
        if word in ("CMD", "ENTRYPOINT", "RUN") and rest.startswith("["):
            add("Dockerfile", json.loads(rest))
    for path in (COMPOSE, COMPOSE_CPU):
        for name, svc in strip_tags(load(path)).get("services", {}).items():
            for key in ("command", "entrypoint"):
                value = svc.get(key)
                if value is not None:
                    add(f"{path.name} {name}", value if isinstance(value, list) else [value])
    script = ENTRYPOINT.read_text(encoding="utf-8")
    for argv in _shell_commands(script):
        if argv[:2] == ["set", "--"]:
            add("entrypoint.sh", [a for a in argv[2:] if not a.startswith("$")])
    for block in re.findall(r"```bash\n(.*?)```", _readme_deploy_section(), flags=re.S):
        for argv in _shell_commands(block):
            add("README", argv)
    return found


# Typer may vendor its own click: reach its classes through typer's public names.
USAGE_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def test_every_ragmt_command_line_parses_in_the_cli() -> None:
    lines = ragmt_command_lines()
    # The ones the deployment depends on are among them.
    heads = {tuple(argv[:1]) for argv in lines.values()}
    assert {("serve",), ("worker",), ("build-store",)} <= heads, sorted(lines)
    root = typer.main.get_command(app)
    assert root.get_command(typer.Context(root), "no-such-command") is None  # can fail
    for where, argv in lines.items():
        if not argv:  # `set -- ragmt "$@"`: whatever the caller gives
            continue
        cmd, parent, args = root, None, list(argv)
        ctx = typer.Context(root, info_name="ragmt")
        while hasattr(cmd, "get_command") and args and not args[0].startswith("-"):
            sub = cmd.get_command(ctx, args[0])
            assert sub is not None, f"{where}: no ragmt command {args[0]!r}"
            cmd, parent, args = sub, ctx, args[1:]
            ctx = typer.Context(cmd, info_name=cmd.name, parent=parent)
        try:  # the options and arguments given must parse (required ones present, names right)
            cmd.make_context(cmd.name, args, parent=parent)
        except typer.Exit:  # --help
            pass
        except USAGE_ERROR as e:
            pytest.fail(f"{where}: {e.format_message()}")


RAGMT_VAR = re.compile(r"\bRAGMT_[A-Z0-9_]+\b")


def test_every_ragmt_variable_named_is_a_settings_field() -> None:
    fields = set(Settings.model_fields)
    scripts = sorted(p for p in (ROOT / "docker").iterdir() if p.is_file())
    files = [COMPOSE, COMPOSE_CPU, DOCKERFILE, *scripts]
    named: dict[str, set[str]] = {}
    for path in files:
        for var in RAGMT_VAR.findall(path.read_text(encoding="utf-8")):
            named.setdefault(var, set()).add(path.name)
    for var in RAGMT_VAR.findall(_readme_deploy_section()):
        named.setdefault(var, set()).add("README.md")
    assert {"RAGMT_REDIS_URL", "RAGMT_ADMIN_KEY", "RAGMT_STORES_DIR"} <= set(named)
    unknown = {
        v: sorted(w) for v, w in named.items() if v.removeprefix("RAGMT_").lower() not in fields
    }
    assert unknown == {}, f"not fields of service.settings.Settings: {unknown}"


# --- Dockerfile -----------------------------------------------------------------------------


RUNTIME_STAGES = ("cpu", "gpu")


def test_dockerfile_targets_and_bases() -> None:
    st = stages()
    assert list(st)[-1] == "gpu", "the default target (last stage) is the GPU image"
    args = global_args()
    assert args["CUDA_IMAGE"].startswith("nvidia/cuda:") and "-runtime-" in args["CUDA_IMAGE"]
    assert st["gpu-base"][0][1].startswith("${CUDA_IMAGE}")
    assert st["gpu"][0][1].startswith("gpu-base") and st["gpu-build"][0][1].startswith("gpu-base")
    assert st["cpu"][0][1].startswith("${PYTHON_IMAGE}")
    # Each runtime stage copies the environment its own build stage made (same base image,
    # so the virtual environment's interpreter path exists).
    for name in RUNTIME_STAGES:
        copies = [r for w, r in st[name] if w == "COPY" and "--from=" in r]
        assert copies == [f"--from={name}-build /opt/venv /opt/venv"]


def test_torch_pin_matches_the_readme_and_targets_install_the_right_faiss() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"torch=={global_args()['TORCH_VERSION']}" in readme
    st = stages()
    cpu_runs = " ".join(r for w, r in st["cpu-build"] if w in ("RUN", "ARG"))
    gpu_runs = " ".join(r for w, r in st["gpu-build"] if w in ("RUN", "ARG"))
    assert "whl/cpu" in cpu_runs and '"torch==$TORCH_VERSION"' in cpu_runs
    assert "pip install ." in cpu_runs and "[gpu]" not in cpu_runs
    assert 'pip install ".[gpu]"' in gpu_runs and '"torch==$TORCH_VERSION"' in gpu_runs
    # The package the GPU stage keeps alone is the one the `gpu` extra names.
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    extra = re.search(r'^gpu = \["([A-Za-z0-9_.-]+)', pyproject, flags=re.M).group(1)
    assert f"pip show {extra} " in gpu_runs and f'"{extra}==$version"' in gpu_runs
    assert "pip uninstall -y faiss-cpu" in gpu_runs


def test_runtime_stages_agree_and_run_unprivileged() -> None:
    st = stages()

    def tail(name: str) -> list[tuple[str, str]]:
        out = []
        for word, rest in st[name][1:]:
            if word == "COPY" and "--from=" in rest:
                continue
            if name == "cpu" and word == "RUN" and "--no-install-recommends g++" in rest:
                continue  # the CPU image's compiler for the native decoding step, its own
            if word == "ENV":
                rest = re.sub(r"\s*RAGMT_DEVICE=\w+", "", rest)
            out.append((word, rest))
        return out

    assert tail("cpu") == tail("gpu")
    assert any("install -y --no-install-recommends g++" in r for w, r in st["cpu"] if w == "RUN")
    instructions = dict(tail("cpu"))  # the last of each kind
    user = instructions["USER"]
    assert user not in ("root", "0") and "--uid 10001" in instructions["RUN"]
    assert f"useradd --create-home --uid 10001 --user-group {user}" in instructions["RUN"]
    assert instructions["VOLUME"] == '["/data"]' and instructions["WORKDIR"] == "/data"
    env = dict(kv.split("=", 1) for kv in instructions["ENV"].split())
    assert env["RAGMT_DATA_DIR"] == "/data" and env["RAGMT_STORES_DIR"] == "/data/stores"
    assert env["RAGMT_HOST"] == "0.0.0.0"
    assert re.search(r'CMD \["python", "/opt/ragmt/healthcheck.py"\]', instructions["HEALTHCHECK"])
    assert "/livez" in HEALTHCHECK.read_text(encoding="utf-8")
    assert json.loads(instructions["ENTRYPOINT"]) == ["/opt/ragmt/entrypoint.sh"]
    assert json.loads(instructions["CMD"]) == ["ragmt", "serve"]
    copied = instructions["COPY"].split()
    assert "docker/entrypoint.sh" in copied and copied[-1] == "/opt/ragmt/"
    for src in copied[1:-1]:  # the scripts the entrypoint calls travel with it
        assert (ROOT / src).is_file()
    assert "wait_for_redis.py" in ENTRYPOINT.read_text(encoding="utf-8")
    assert "docker/wait_for_redis.py" in copied and "docker/healthcheck.py" in copied


def _dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; a pattern matching a parent counts."""

    def rx(pattern: str) -> re.Pattern[str]:
        out = ""
        for part in re.split(r"(\*\*|\*|\?)", pattern.strip("/")):
            out += {"**": ".*", "*": "[^/]*", "?": "[^/]"}.get(part, re.escape(part))
        return re.compile(out)

    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        compiled = rx(pattern.removeprefix("!"))
        if any(compiled.fullmatch(p) for p in prefixes):
            ignored = not negate
    return ignored


def test_dockerignore_lets_in_what_the_dockerfile_copies_and_nothing_heavy() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    sources = set()
    for word, rest in dockerfile_instructions():
        if word == "COPY" and "--from=" not in rest:
            args = [a for a in rest.split() if not a.startswith("--")]
            sources.update(args[:-1])
    assert {"models", "service", "index_builder", "pyproject.toml"} <= sources
    for src in sorted(sources):
        paths = [src]
        if (ROOT / src).is_dir():
            paths += [
                p.relative_to(ROOT).as_posix()
                for p in (ROOT / src).rglob("*")
                if p.is_file() and "__pycache__" not in p.parts
            ]
        for path in paths:
            assert not _dockerignored(path, patterns), f"{path} is excluded by .dockerignore"
    # The committed bundles are package data (so `pip install .` puts them in the image, where
    # the Dockerfile checks them), and in the build context even before they are committed.
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    for bundle in ("semiparametric_bundle", "baseline_bundle", "baseline_de_en_bundle"):
        assert re.search(rf'^models = \[[^]]*"{bundle}/\*"', pyproject, flags=re.M), bundle
        assert not _dockerignored(f"models/{bundle}/manifest.json", patterns)
    assert "for b in semiparametric_bundle baseline_bundle baseline_de_en_bundle" in dockerfile
    heavy = ".git/HEAD data/en-de/manifest.json runs/base/ckpt stores/x/ACTIVE .venv/bin/python"
    for path in [*heavy.split(), "service/__pycache__/cli.cpython-311.pyc"]:
        assert _dockerignored(path, patterns), path


# --- the entrypoint and healthcheck scripts, outside Docker ----------------------------------


def _run_entrypoint(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "RAGMT_REDIS_URL"}
    # The image has the project's venv first on PATH; here, this interpreter's bin directory.
    base["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{base.get('PATH', '')}"
    return subprocess.run(
        ["sh", str(ENTRYPOINT), *args],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.system
def test_entrypoint_waits_for_redis_then_runs_ragmt(redis_url: str) -> None:
    done = _run_entrypoint("ragmt", "--help", env={"RAGMT_REDIS_URL": redis_url})
    assert done.returncode == 0, done.stderr
    assert "is up" in done.stderr and "serve" in done.stdout and "build-store" in done.stdout


@pytest.mark.system
def test_entrypoint_puts_ragmt_before_a_bare_sub_command(redis_url: str) -> None:
    done = _run_entrypoint("build-store", "--help", env={"RAGMT_REDIS_URL": redis_url})
    assert done.returncode == 0, done.stderr
    assert "--domain" in done.stdout and "--corpus" in done.stdout
    done = _run_entrypoint("--help")  # an option alone: `ragmt --help`; no Redis configured
    assert done.returncode == 0 and "build-store" in done.stdout
    assert "Redis" not in done.stderr  # no RAGMT_REDIS_URL: no wait


@pytest.mark.system
def test_entrypoint_runs_other_programs_as_given(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    done = _run_entrypoint(sys.executable, "-c", f"open({str(marker)!r}, 'w').write('x')")
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "x"


@pytest.mark.system
def test_entrypoint_gives_up_on_an_unreachable_redis(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    url = f"redis://:hunter2@127.0.0.1:{_free_port()}/0"  # nothing listens there
    start = time.monotonic()
    done = _run_entrypoint(
        sys.executable,
        "-c",
        f"open({str(marker)!r}, 'w')",
        env={"RAGMT_REDIS_URL": url, "WAIT_FOR_REDIS_S": "1"},
    )
    elapsed = time.monotonic() - start
    assert done.returncode == 1
    assert not marker.exists(), "the command ran although Redis never answered"
    assert "no answer within 1 s" in done.stderr and "127.0.0.1" in done.stderr
    assert "hunter2" not in done.stderr and ":***@" in done.stderr
    assert 1 <= elapsed < 15


@pytest.mark.system
def test_entrypoint_gives_up_on_a_redis_that_never_answers(tmp_path: Path) -> None:
    """Accepts connections but never replies (hung, or not Redis): bounded by the timeout."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)  # the kernel completes handshakes; nobody ever reads or writes
        port = server.getsockname()[1]
        start = time.monotonic()
        done = _run_entrypoint(
            "true", env={"RAGMT_REDIS_URL": f"redis://127.0.0.1:{port}", "WAIT_FOR_REDIS_S": "1"}
        )
        elapsed = time.monotonic() - start
    assert done.returncode == 1
    assert "no answer within 1 s" in done.stderr and "imeout" in done.stderr
    assert elapsed < 15


@pytest.mark.system
def test_entrypoint_refuses_a_malformed_url_at_once() -> None:
    start = time.monotonic()
    done = _run_entrypoint("true", env={"RAGMT_REDIS_URL": "http://redis:6379"})
    assert done.returncode == 1 and "invalid RAGMT_REDIS_URL" in done.stderr
    assert time.monotonic() - start < 10


@pytest.mark.system
@pytest.mark.skipif(
    not has_redis_server(), reason="needs redis-server (Debian package redis-server)"
)
def test_entrypoint_waits_for_a_redis_that_comes_up_late(tmp_path: Path) -> None:
    """A Redis started 1.5 s after the container: the wait bridges it and the command runs."""
    port = _free_port()
    marker = tmp_path / "ran"
    procs: list[subprocess.Popen[bytes]] = []

    def start_redis() -> None:
        time.sleep(1.5)
        procs.append(
            subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1"]
                + ["--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )

    starter = threading.Thread(target=start_redis)
    starter.start()
    try:
        done = _run_entrypoint(
            sys.executable,
            "-c",
            f"open({str(marker)!r}, 'w')",
            env={"RAGMT_REDIS_URL": f"redis://127.0.0.1:{port}/0", "WAIT_FOR_REDIS_S": "20"},
        )
    finally:
        starter.join()
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)
    assert done.returncode == 0, done.stderr
    assert marker.exists() and "is up" in done.stderr


class _Livez(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        code = self.status if self.path == "/livez" else 404
        self.send_response(code)
        self.end_headers()
        self.wfile.write(b'{"status":"ok"}')

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def livez_server() -> Iterator[http.server.HTTPServer]:
    server = http.server.HTTPServer(("127.0.0.1", 0), type("H", (_Livez,), {}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _healthcheck(port: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAGMT_PORT": str(port)}
    return subprocess.run(
        [sys.executable, str(HEALTHCHECK)], env=env, capture_output=True, text=True, timeout=30
    )


@pytest.mark.system
def test_healthcheck_follows_livez(livez_server: http.server.HTTPServer) -> None:
    port = livez_server.server_address[1]
    assert _healthcheck(port).returncode == 0
    livez_server.RequestHandlerClass.status = 503
    failed = _healthcheck(port)
    assert failed.returncode == 1 and "503" in failed.stderr
    assert _healthcheck(_free_port()).returncode == 1  # nothing listening


# --- README ---------------------------------------------------------------------------------


def test_readme_deploy_section_covers_compose_scale_builder_and_admin_key() -> None:
    section = _readme_deploy_section()
    blocks = "\n".join(re.findall(r"```bash\n(.*?)```", section, flags=re.S))
    assert "RAGMT_ADMIN_KEY" in blocks
    assert re.search(r"docker compose up\b.*--scale api=3", blocks)
    assert "-f docker-compose.yml -f docker-compose.cpu.yml" in blocks
    assert re.search(r"docker compose run\b.*index-builder", re.sub(r"\\\n\s*", " ", blocks))
    assert "/v1/domains/" in blocks and "/activate" in blocks


def test_readme_has_an_architecture_picture() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"^## Architecture\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M)
    assert m, "README has no '## Architecture' section"
    picture = re.search(r"```(?:mermaid|text)\n(.*?)```", m.group(1), flags=re.S)
    assert picture, "no picture (mermaid or text block) in the Architecture section"
    for part in ("proxy", "api", "Redis", "store", "model", "index-builder"):
        assert part.lower() in picture.group(1).lower(), part
