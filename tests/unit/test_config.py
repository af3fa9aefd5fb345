"""acme.toml: search order, validation, and errors that name file, field and value."""

from __future__ import annotations

import subprocess
import sys

import pytest

from slurm_acme.config import AcmeConfig, find_config_path, load_config
from slurm_acme.errors import ConfigError


def test_defaults_without_any_file(monkeypatch, tmp_path):
    monkeypatch.delenv("ACME_CONF", raising=False)
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr("slurm_acme.config.SYSTEM_CONFIG", tmp_path / "absent.toml")
    config = load_config()
    assert config == AcmeConfig()
    assert config.source is None
    assert config.report.tdp_watts == 400


def test_search_order(monkeypatch, tmp_path):
    system = tmp_path / "system.toml"
    system.write_text("")
    monkeypatch.setattr("slurm_acme.config.SYSTEM_CONFIG", system)
    monkeypatch.setenv("ACME_CONF", str(tmp_path / "env.toml"))
    assert find_config_path(tmp_path / "flag.toml") == tmp_path / "flag.toml"
    assert find_config_path() == tmp_path / "env.toml"
    monkeypatch.delenv("ACME_CONF")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm" / "slurm.conf"))
    assert find_config_path() == system  # nothing beside slurm.conf
    (tmp_path / "slurm").mkdir()
    (tmp_path / "slurm" / "acme.toml").write_text("")
    assert find_config_path() == tmp_path / "slurm" / "acme.toml"
    monkeypatch.delenv("SLURM_CONF")
    assert find_config_path() == system


def test_values_are_read(tmp_path):
    path = tmp_path / "acme.toml"
    path.write_text('[store]\nurl = "sqlite:////x.db"\n[cluster]\nname = "seren"\n'
                    '[[cluster.name_rules]]\npattern = "^llama"\ntype = "Pretrain"\n')
    config = load_config(path)
    assert config.store.url == "sqlite:////x.db"
    assert config.cluster.name == "seren"
    assert [r.type for r in config.cluster.name_rules] == ["Pretrain"]
    assert config.source == str(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[store]\nurll = 'x'\n", "unknown field 'store.urll'"),
        ("[report]\ntdp_watts = -5\n", "field 'report.tdp_watts'"),
        ("[report]\ntdp_watts = 'hot'\n", "(got 'hot')"),
        ("[[cluster.name_rules]]\npattern = 'x'\ntype = 'Training'\n", "field 'cluster.name_rules.0.type'"),
        ("[store\nurl = 1\n", "malformed TOML"),
    ],
)
def test_errors_name_file_field_and_value(tmp_path, text, message):
    path = tmp_path / "acme.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_explicit_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.toml")


def test_cli_malformed_config_is_one_line_exit_2(tmp_path):
    path = tmp_path / "acme.toml"
    path.write_text("[store]\nurll = 'x'\n")
    proc = subprocess.run([sys.executable, "-m", "slurm_acme", "--config", str(path), "db", "info"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"sacme: error: {path}: unknown field 'store.urll'"


# ------------------------------------------------- granting settings: system config only

def _system(monkeypatch, tmp_path, text):
    from pathlib import Path

    folder = tmp_path / "etc-acme"
    folder.mkdir(mode=0o755)
    path = Path(folder / "acme.toml")
    path.write_text(text)
    path.chmod(0o644)
    monkeypatch.setattr("slurm_acme.config.SYSTEM_CONFIG", path)
    return path


def test_a_root_owned_system_config_grants(monkeypatch, tmp_path):
    from slurm_acme.config import system_config, untrusted_reason

    path = _system(monkeypatch, tmp_path, '[report]\nadmin_group = "hpc-admins"\n')
    assert untrusted_reason(path) is None
    assert system_config().report.admin_group == "hpc-admins"


@pytest.mark.parametrize("spoil", ["chmod-file", "chmod-dir", "chown-file"])
def test_a_system_config_others_could_write_grants_nothing(monkeypatch, tmp_path, spoil):
    import os

    from slurm_acme.config import system_config, untrusted_reason

    path = _system(monkeypatch, tmp_path, '[report]\nadmin_group = "users"\n'
                                          '[evaluate]\nallow_unsandboxed_code = true\n')
    if spoil == "chmod-file":
        path.chmod(0o666)
    elif spoil == "chmod-dir":
        path.parent.chmod(0o777)
    else:
        os.chown(path, 65534, 65534)
    assert untrusted_reason(path) is not None
    assert system_config().report.admin_group == "root"
    assert system_config().evaluate.allow_unsandboxed_code is False


def test_a_user_config_sets_options_but_its_grants_are_ignored(monkeypatch, tmp_path):
    from slurm_acme.config import ignored_grants, system_config

    _system(monkeypatch, tmp_path, "")
    mine = tmp_path / "mine.toml"
    mine.write_text('[report]\nadmin_group = "alice"\ntdp_watts = 300\n')
    monkeypatch.setenv("ACME_CONF", str(mine))
    config = load_config()
    assert config.report.tdp_watts == 300  # an ordinary option is honoured
    assert ignored_grants(config) == ["report.admin_group"]
    assert system_config().report.admin_group == "root"
