"""Where the client takes its URL and token from, and in which order."""

from __future__ import annotations

from pathlib import Path

import pytest

from portal.cli.config import ConfigError, Settings, default_config_path, resolve


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def test_default_config_path_follows_xdg_then_home(home: Path, tmp_path: Path) -> None:
    assert default_config_path({"HOME": str(home)}) == home / ".config/gpusched/config.toml"
    xdg = tmp_path / "xdg"
    assert default_config_path({"HOME": str(home), "XDG_CONFIG_HOME": str(xdg)}) == (
        xdg / "gpusched/config.toml"
    )


def test_default_config_file_is_read(home: Path) -> None:
    write(home / ".config/gpusched/config.toml",
          'url = "http://file:8000/"\ntoken = "file-token"\ntimeout = 5\n')
    assert resolve(env={"HOME": str(home)}) == Settings("http://file:8000", "file-token", 5.0)


def test_environment_overrides_file_and_flags_override_environment(home: Path) -> None:
    write(home / ".config/gpusched/config.toml", 'url = "http://file:1"\ntoken = "file-token"\n')
    env = {"HOME": str(home), "GPUSCHED_URL": "http://env:2", "GPUSCHED_TOKEN": "env-token"}
    assert resolve(env=env) == Settings("http://env:2", "env-token")
    assert resolve(env=env, flag_url="http://flag:3") == Settings("http://flag:3", "env-token")
    assert resolve(env=env, flag_token="flag-token", flag_timeout=7) == Settings(
        "http://env:2", "flag-token", 7.0
    )


def test_sources_mix_per_key(home: Path) -> None:
    write(home / ".config/gpusched/config.toml", 'token = "file-token"\n')
    env = {"HOME": str(home), "GPUSCHED_URL": "http://env:2"}
    assert resolve(env=env) == Settings("http://env:2", "file-token")


def test_empty_environment_value_falls_through_to_file(home: Path) -> None:
    write(home / ".config/gpusched/config.toml", 'url = "http://file:1"\ntoken = "t"\n')
    env = {"HOME": str(home), "GPUSCHED_URL": "  "}
    assert resolve(env=env).url == "http://file:1"


def test_gpusched_config_variable_and_flag_select_the_file(home: Path, tmp_path: Path) -> None:
    write(home / ".config/gpusched/config.toml", 'url = "http://default:1"\ntoken = "d"\n')
    by_env = write(tmp_path / "env.toml", 'url = "http://byenv:1"\ntoken = "e"\n')
    by_flag = write(tmp_path / "flag.toml", 'url = "http://byflag:1"\ntoken = "f"\n')
    env = {"HOME": str(home), "GPUSCHED_CONFIG": str(by_env)}
    assert resolve(env=env).url == "http://byenv:1"
    assert resolve(env=env, flag_config=str(by_flag)).url == "http://byflag:1"


def test_named_config_file_must_exist_but_default_may_be_absent(home: Path, tmp_path: Path) -> None:
    env = {"HOME": str(home), "GPUSCHED_URL": "http://x:1", "GPUSCHED_TOKEN": "t"}
    assert resolve(env=env).url == "http://x:1"  # no default file: fine
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=f"config file {missing} does not exist"):
        resolve(env={**env, "GPUSCHED_CONFIG": str(missing)})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('url = "http://x:1"\ntoken = \n', "Invalid value"),
        ('url = "http://x:1"\ntoken = "t"\ncolour = "red"\n', "unknown key 'colour'"),
        ('url = 5\ntoken = "t"\n', "url must be a string"),
        ('url = "http://x:1"\ntoken = "t"\ntimeout = "soon"\n', "timeout must be a number"),
        ('url = "http://x:1"\ntoken = "t"\ntimeout = true\n', "timeout must be a number"),
    ],
)
def test_bad_config_file_is_an_error_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path / "c.toml", text)
    with pytest.raises(ConfigError, match=message) as info:
        resolve(flag_config=str(path), env={"HOME": str(tmp_path)})
    assert str(path) in str(info.value)


def test_missing_url_and_token_say_how_to_provide_them(home: Path) -> None:
    with pytest.raises(ConfigError, match="no portal URL: pass --url, set GPUSCHED_URL"):
        resolve(env={"HOME": str(home)})
    with pytest.raises(ConfigError, match="no API token: .*/account/tokens/"):
        resolve(env={"HOME": str(home), "GPUSCHED_URL": "http://x:1"})


@pytest.mark.parametrize("url", ["ftp://host", "localhost:8000", "http://"])
def test_url_must_be_http(home: Path, url: str) -> None:
    with pytest.raises(ConfigError, match="GPUSCHED_URL: .* is not an http"):
        resolve(env={"HOME": str(home), "GPUSCHED_URL": url, "GPUSCHED_TOKEN": "t"})


def test_non_positive_timeout_is_rejected(home: Path) -> None:
    env = {"HOME": str(home), "GPUSCHED_URL": "http://x:1", "GPUSCHED_TOKEN": "t"}
    with pytest.raises(ConfigError, match="timeout must be positive"):
        resolve(env=env, flag_timeout=0)
