"""The built-in installation commands: plugins, stores, config check."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from scopemem.cli import build_cli
from scopemem.plugins.manager import new_plugin_manager


def run(*args: str, env: dict[str, str] | None = None):
    cli = build_cli(new_plugin_manager(environ={}))
    return CliRunner().invoke(cli, list(args), env=env)


def test_stores_lists_the_builtin_stores():
    result = run("stores", "--json")
    assert result.exit_code == 0
    assert {"memory", "null"} <= set(json.loads(result.output))


def test_plugins_lists_builtins_and_entry_points():
    result = run("plugins", "--json")
    assert result.exit_code == 0
    names = {row["name"] for row in json.loads(result.output)}
    assert {"scopemem.plugins.builtin_gate", "memory", "null"} <= names
    human = run("plugins")
    assert "scopemem.plugins.builtin_scopes: scopemem_scope_kinds" in human.output


def test_config_check_prints_effective_settings(tmp_path: Path):
    path = tmp_path / "scopemem.toml"
    path.write_text('[memory]\nenabled = true\norganization = "acme"\nstore = "memory"\n')
    result = run("--config", str(path), "config", "check", "--json")
    assert result.exit_code == 0, result.output
    settings = json.loads(result.output)
    assert settings["organization"] == "acme" and settings["limit"] == 32


def test_config_check_names_the_bad_key_without_a_traceback(tmp_path: Path):
    path = tmp_path / "scopemem.toml"
    path.write_text("[memory]\nlimit = 'many'\n")
    result = run("--config", str(path), "config", "check")
    assert result.exit_code == 1
    assert "memory.limit" in result.output and "Traceback" not in result.output
    missing = run("--config", str(tmp_path / "nope.toml"), "config", "check")
    assert missing.exit_code == 1 and "no such configuration file" in missing.output


def test_config_check_refuses_an_uninstalled_store(tmp_path: Path):
    path = tmp_path / "scopemem.toml"
    path.write_text('[memory]\nenabled = true\norganization = "a"\nstore = "postgres"\n')
    result = run("--config", str(path), "config", "check")
    assert result.exit_code == 1 and "plugin may not be installed" in result.output


def test_the_console_script_is_installed():
    script = Path(sys.executable).with_name("scopemem")
    completed = subprocess.run([str(script), "--help"], capture_output=True, text=True,
                               timeout=60, check=False)
    assert completed.returncode == 0 and "config" in completed.stdout


def test_config_check_validates_the_reflection_provider(tmp_path: Path):
    path = tmp_path / "scopemem.toml"
    path.write_text('[memory]\nmodel = "nosuch/m1"\n')
    result = run("--config", str(path), "config", "check")
    assert result.exit_code == 1 and "memory.model" in result.output
    assert "plugin may not be installed" in result.output
    path.write_text('[memory]\nmodel = "openai/gpt-4o-mini"\n'
                    '[memory.providers.openai]\ntimeout_seconds = -1\n')
    result = run("--config", str(path), "config", "check")
    assert result.exit_code == 1 and "memory.providers.openai.timeout_seconds" in result.output
    path.write_text('[memory]\nmodel = "openai/gpt-4o-mini"\n')
    assert run("--config", str(path), "config", "check").exit_code == 0
