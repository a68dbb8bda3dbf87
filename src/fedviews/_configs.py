"""The configs shipped in the package (the repository's ``configs/``, package data of the
wheel): ``fedviews configs list|copy`` and ``fedviews run NAME`` outside the repository."""

from __future__ import annotations

import re
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from fedviews._tables import closest
from fedviews.errors import ConfigError

_SENTENCE_END = re.compile(r"[.?!](?=\s+[A-Z(`]|$)")


def _shipped() -> dict[str, Traversable]:
    """The shipped configs by name (the file's stem)."""
    folder = resources.files("fedviews") / "configs"
    if not folder.is_dir():
        return {}
    return {f.name.removesuffix(".toml"): f for f in folder.iterdir() if f.name.endswith(".toml")}


def list_configs() -> dict[str, str]:
    """``{name: description}`` of the shipped configs, sorted by name; the description is the
    first line of the file's leading comment, continued to the end of its sentence (a line
    cut at "CIFAR cannot be" hid how to run the CIFAR configs)."""
    out: dict[str, str] = {}
    for name, f in sorted(_shipped().items()):
        lines = []
        for line in f.read_text(encoding="utf-8").lstrip().splitlines():
            text = line.lstrip("#").strip()
            # the paragraph ends at a blank line, a command or an indented (code) line
            code = text.startswith("fedviews ") or line.lstrip("#").startswith("  ")
            if not line.startswith("#") or not text or code:
                break
            lines.append(text)
        paragraph = " ".join(lines)
        first = len(lines[0]) if lines else 0
        # a sentence ends at . ? or ! before a capital (not "Eq. 12", "e.g. the") or the end
        end = _SENTENCE_END.search(paragraph, max(first - 1, 0))
        out[name] = paragraph[: end.end()].strip() if end else paragraph
    return out


def shipped_config(name: str) -> Traversable:
    """The shipped config ``name`` (``mmvfl_handwritten``; ``.toml`` may be given).

    Raises
    ------
    ConfigError
        When no shipped config has that name (naming the closest one).
    """
    configs = _shipped()
    stem = name.removesuffix(".toml")
    if stem not in configs:
        near = closest(stem, list(configs))  # (not the list of every name: that is below)
        raise ConfigError(
            f"no shipped config named {name!r}{near if near.startswith('; did you') else ''} "
            "(`fedviews configs list` shows them)"
        )
    return configs[stem]


def copy_config(name: str, dest: Path | None = None, *, force: bool = False) -> Path:
    """Copy the shipped config ``name`` to ``dest`` (a ``.toml`` file, or else a folder to put
    ``NAME.toml`` in, made if missing; default: ``./NAME.toml``) and return the file written.

    Raises
    ------
    ConfigError
        For an unknown name, or when the file exists already (unless ``force``).
    """
    src = shipped_config(name)
    target = dest if dest is not None else Path(src.name)
    if target.is_dir() or target.suffix != ".toml":
        target = target / src.name
    if target.exists() and not force:
        raise ConfigError(f"{target} exists already: choose another DEST, or --force")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
    return target


def resolve_config(path: Path) -> Path:
    """``path`` if it is a file; for a bare ``NAME``, ``NAME.toml`` where that is a file (the
    copy ``fedviews configs copy NAME`` wrote, edited); otherwise the shipped config of that
    name, when ``path`` is a bare name or ``configs/NAME[.toml]`` (the commands of the docs,
    run outside the repository); otherwise ``path`` (whose reader then says that it does
    not exist).

    Raises
    ------
    ConfigError
        When ``path`` is a bare name or ``configs/NAME`` and neither a file nor a shipped
        config has it.
    """
    if path.is_file() or path.parent not in (Path("."), Path("configs")):
        return path
    copy = path.with_name(path.name + ".toml")
    if path.parent == Path(".") and not path.name.endswith(".toml") and copy.is_file():
        return copy
    found = _shipped().get(path.name.removesuffix(".toml"))
    if found is None:
        near = closest(path.name.removesuffix(".toml"), list(_shipped()))
        raise ConfigError(
            f"config file {str(path)!r} does not exist, nor does a shipped config of that name"
            f"{near if near.startswith('; did you mean') else ''} "
            "(`fedviews configs list` shows them)"
        )
    return Path(str(found)) if isinstance(found, Path) else path


def config_file(path: Path) -> Path:
    """:func:`resolve_config` of a command's CONFIG argument, saying on the terminal when it is
    a shipped config (``configs/NAME.toml: the shipped config ...``): what ``fedviews run`` and
    every deployment command take."""
    from fedviews._console import console

    found = resolve_config(path)
    if found == path.with_name(path.name + ".toml"):
        shipped = path.name in _shipped()
        said = f"{path}: the file {found}" + (
            f" (`configs/{path.name}` runs the shipped one)" if shipped else ""
        )
    elif found != path:
        said = f"{path}: the shipped config {found}"
    else:
        return found
    console.print(said, highlight=False, soft_wrap=True)
    return found
