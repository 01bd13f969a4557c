"""Sandbox images without a registry.

Three kinds, all tagged ``seal-sandbox:<kind>-<hash>`` by a content hash of what defines them, so an image
is built once per definition and rebuilt when the definition changes:

- ``host-python`` (default): an empty imported image; the host's Python prefix(es), site-packages,
  editable-install sources and system libraries are bind-mounted read-only at their original paths at
  run time, so whatever is installed on the host (bfcl-eval, seal_envs.domains) imports in the container.
- ``debootstrap``: a minimal Debian rootfs with python3 (``debootstrap --variant=minbase``), cached as a
  tarball under ``~/.cache/seal``; independent of the host's Python, but has only the standard library.
- ``dockerfile``: ``docker build`` of the shipped ``Dockerfile`` (needs a registry for its base image).

Any other image name is used as given; its ``seal.python`` label (default ``python3``) names the interpreter.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import io
import json
import os
import shutil
import site
import subprocess
import sys
import tarfile
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import docker
import docker.errors

ImageKind = Literal["host-python", "debootstrap", "dockerfile"]
KINDS: tuple[ImageKind, ...] = ("host-python", "debootstrap", "dockerfile")
REPOSITORY = "seal-sandbox"
BUILDER_VERSION = "1"  # bump when the way images are built changes
SERVER_SOURCE = Path(__file__).with_name("server.py")
DOCKERFILE = Path(__file__).with_name("Dockerfile")
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "seal"
DEBIAN_MIRROR = os.environ.get("SEAL_DEBIAN_MIRROR", "http://deb.debian.org/debian")
LIBRARY_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/lib32")
ROOT_LINKS = ("/bin", "/sbin", *LIBRARY_DIRS)
TRIM_PATHS = ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/locale",
              "usr/share/info")
NOBODY = 65534

Progress = Callable[[str], None]


def _stderr(message: str) -> None:
    print(f"[seal] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class ImageSpec:
    """A ready image and how to run the tool server in it."""

    tag: str
    kind: str
    python: str  # the interpreter inside the container
    mounts: tuple[str, ...] = ()  # host paths bind-mounted read-only at the same path


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _exists(client: docker.DockerClient, tag: str) -> bool:
    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


# ---------------------------------------------------------------------------------------------- host-python


def _editable_sources() -> list[str]:
    """Source paths of editable installs (setuptools' ``__editable__`` finders and plain ``.pth`` entries)."""
    found: list[str] = []
    for directory in _site_dirs():
        for pth in sorted(Path(directory).glob("*.pth")):
            for line in pth.read_text(errors="replace").splitlines():
                line = line.strip()
                if line and not line.startswith(("#", "import ")) and os.path.isdir(line):
                    found.append(os.path.abspath(line))
        for finder in sorted(Path(directory).glob("__editable__*finder.py")):
            mapping = _literal_assignment(finder.read_text(errors="replace"), "MAPPING")
            for target in (mapping or {}).values():
                if os.path.isdir(target):
                    found.append(target)
                else:  # a single-module mapping names the module path without its suffix
                    found.extend(str(p) for p in Path(target).parent.glob(Path(target).name + ".py"))
    return found


def _literal_assignment(source: str, name: str) -> Any:
    import ast

    for node in ast.parse(source).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value is not None:
                return ast.literal_eval(node.value)
    return None


def _site_dirs() -> list[str]:
    dirs = list(site.getsitepackages())
    user = site.getusersitepackages()
    if isinstance(user, str):
        dirs.append(user)
    return [d for d in dirs if os.path.isdir(d)]


def minimal_cover(paths: Iterable[str]) -> tuple[str, ...]:
    """The given paths without those inside another one (a mount of the parent already covers them)."""
    result: list[str] = []
    for path in sorted({os.path.abspath(p) for p in paths}):
        if not any(path == kept or path.startswith(kept.rstrip("/") + "/") for kept in result):
            result.append(path)
    return tuple(result)


def host_python_mounts() -> tuple[str, ...]:
    """What the host's Python needs at its original paths: prefixes, site dirs, editable sources, libraries."""
    paths = {sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable)), *_site_dirs(),
             *_editable_sources()}
    paths.update(d for d in LIBRARY_DIRS if os.path.isdir(d) and not os.path.islink(d))
    if os.path.isfile("/etc/ld.so.cache"):
        paths.add("/etc/ld.so.cache")
    return minimal_cover(p for p in paths if os.path.exists(p))


TASK_FILES = "*tasks*.json"  # a domain folder's task files: initial states and ground-truth calls
BFCL_ANSWERS = ("bfcl_eval", "data", "possible_answer")


@functools.cache
def _bfcl_answers() -> str | None:
    """bfcl-eval's ground-truth folder, found without importing bfcl-eval."""
    spec = importlib.util.find_spec(BFCL_ANSWERS[0])
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = os.path.join(location, *BFCL_ANSWERS[1:])
        if os.path.isdir(candidate):
            return candidate
    return None


def domain_folders(mounts: Iterable[str]) -> tuple[str, ...]:
    """The domain folders (a folder with ``tools.json``) at or one level below ``mounts``."""
    found: list[str] = []
    for mount in (m for m in mounts if os.path.isdir(m)):
        found += [str(spec.parent) for spec in [Path(mount, "tools.json"), *Path(mount).glob("*/tools.json")]
                  if spec.is_file()]
    return tuple(sorted(found))


def tool_module_paths(python_paths: Iterable[str], targets: Iterable[str]) -> tuple[str, ...]:
    """What a domain's tools need of its folder: in each python path, the top-level module or package (any file
    or folder of that name, extensions included) that a ``module:Class[.method]`` target names, and what an MCP
    domain's ``tools.json`` there declares its server needs (``mcp_server_files``)."""
    tops = {target.split(":")[0].split(".")[0] for target in targets}
    found: list[str] = []
    for path in python_paths:
        entries = os.listdir(path) if os.path.isdir(path) else []
        found += [os.path.join(path, e) for e in entries if e.split(".")[0] in tops and e != "__pycache__"]
        found += mcp_server_files(path)
    return tuple(sorted(set(found)))


def mcp_server_files(folder: str) -> list[str]:
    """An MCP domain folder's ``tools.json`` (the bridge reads its ``mcp`` block) and the files of that folder its
    server command names in ``args``; nothing for other folders."""
    spec = os.path.join(folder, "tools.json")
    try:
        with open(spec, encoding="utf-8") as handle:
            block = json.load(handle).get("mcp")
    except (OSError, ValueError, AttributeError):
        return []
    if not isinstance(block, dict):
        return []
    named = [os.path.join(folder, str(arg)) for arg in block.get("args", []) if isinstance(arg, (str, int))]
    inside = [p for p in named if os.path.realpath(p).startswith(os.path.realpath(folder) + os.sep) and os.path.exists(p)]
    return [spec, *inside]


def ground_truth_paths(mounts: Iterable[str]) -> tuple[str, ...]:
    """What the sandbox must not show tool code although it lies under ``mounts``: the task files of every
    domain folder mounted (a folder with ``tools.json``, or one level above such folders) and bfcl-eval's
    possible answers."""
    found: list[str] = []
    mounts = [m for m in mounts if os.path.isdir(m)]
    for mount in mounts:
        for spec in [Path(mount, "tools.json"), *Path(mount).glob("*/tools.json")]:
            found += sorted(str(p) for p in spec.parent.glob(TASK_FILES)) if spec.is_file() else []
    answers = _bfcl_answers()
    if answers and any(answers.startswith(m.rstrip("/") + "/") for m in mounts):
        found.append(answers)
    return tuple(found)


def _root_links() -> dict[str, str]:
    """The host's top-level symlinks (merged /usr: /lib -> usr/lib), recreated in the empty image."""
    return {path: os.readlink(path) for path in ROOT_LINKS if os.path.islink(path)}


def _host_python_tarball(links: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        def add(name: str, kind: bytes, mode: int, data: bytes = b"", target: str = "") -> None:
            info = tarfile.TarInfo(name.lstrip("/"))
            info.type, info.mode, info.size, info.linkname, info.mtime = kind, mode, len(data), target, 0
            tar.addfile(info, io.BytesIO(data) if data else None)

        for directory in ("etc", "tmp", "proc", "sys", "dev", "usr", "opt"):
            add(directory, tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755)
        for path, target in links.items():
            add(path, tarfile.SYMTYPE, 0o777, target=target)
        passwd = f"root:x:0:0::/:/bin/false\nnobody:x:{NOBODY}:{NOBODY}::/tmp:/bin/false\n"
        add("etc/passwd", tarfile.REGTYPE, 0o644, passwd.encode())
        add("etc/group", tarfile.REGTYPE, 0o644, f"root:x:0:\nnogroup:x:{NOBODY}:\n".encode())
    return buffer.getvalue()


def host_python_image(client: docker.DockerClient, progress: Progress = _stderr) -> ImageSpec:
    python = os.path.realpath(sys.executable)
    links = _root_links()
    tag = f"{REPOSITORY}:host-python-{_digest(BUILDER_VERSION, 'host-python', python, links)}"
    if not _exists(client, tag):
        progress(f"building sandbox image {tag} (empty image + host Python {python} mounted read-only; once)")
        client.api.import_image_from_data(_host_python_tarball(links), repository=tag.split(":")[0],
                                          tag=tag.split(":")[1], changes=_changes("host-python", python))
    return ImageSpec(tag, "host-python", python, host_python_mounts())


def _changes(kind: str, python: str) -> list[str]:
    return [f"LABEL seal.image.kind={kind} seal.python={python}",
            "ENV PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 HOME=/tmp"]


# ---------------------------------------------------------------------------------------------- debootstrap


def _debian_suite() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("VERSION_CODENAME=") and line.split("=", 1)[1].strip('"'):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return "bookworm"


def debootstrap_tarball(suite: str, progress: Progress = _stderr) -> Path:
    """The cached rootfs tarball (built with debootstrap on first use: about half a minute)."""
    tarball = CACHE_DIR / f"debootstrap-{suite}-{_digest(BUILDER_VERSION, suite, DEBIAN_MIRROR)}.tar"
    if tarball.exists():
        return tarball
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed: `apt-get install -y debootstrap`, or use the "
                           "host-python image (the default)")
    if os.geteuid() != 0:
        raise RuntimeError("debootstrap needs root; build the image once as root with `seal-envs image build "
                           "--kind debootstrap`, or use the host-python image (the default)")
    progress(f"debootstrapping Debian {suite} with python3 from {DEBIAN_MIRROR} (about 30 s; cached in {tarball})")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="seal-rootfs-") as root:
        command = ["debootstrap", "--variant=minbase", "--include=python3", suite, root, DEBIAN_MIRROR]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"debootstrap failed ({done.returncode}); last output:\n"
                               f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
        for relative in TRIM_PATHS:
            shutil.rmtree(Path(root, relative), ignore_errors=True)
        partial = tarball.with_suffix(".partial")
        subprocess.run(["tar", "-C", root, "--numeric-owner", "-cf", str(partial), "."], check=True)
        partial.rename(tarball)
    return tarball


def debootstrap_image(client: docker.DockerClient, progress: Progress = _stderr) -> ImageSpec:
    suite = _debian_suite()
    tag = f"{REPOSITORY}:debootstrap-{suite}-{_digest(BUILDER_VERSION, suite, DEBIAN_MIRROR)}"
    if not _exists(client, tag):
        tarball = debootstrap_tarball(suite, progress)
        progress(f"importing {tarball} as {tag}")
        repository, name = tag.split(":")
        client.api.import_image_from_file(str(tarball), repository=repository, tag=name,
                                          changes=_changes("debootstrap", "/usr/bin/python3"))
    return ImageSpec(tag, "debootstrap", "/usr/bin/python3")


# ---------------------------------------------------------------------------------------------- dockerfile


def dockerfile_image(client: docker.DockerClient, progress: Progress = _stderr) -> ImageSpec:
    tag = f"{REPOSITORY}:dockerfile-{_digest(BUILDER_VERSION, DOCKERFILE.read_text(), SERVER_SOURCE.read_text())}"
    if not _exists(client, tag):
        progress(f"building {tag} from {DOCKERFILE} (pulls its base image from your registry)")
        with tempfile.TemporaryDirectory(prefix="seal-build-") as context:
            shutil.copy(DOCKERFILE, Path(context, "Dockerfile"))
            shutil.copy(SERVER_SOURCE, Path(context, "server.py"))
            try:
                client.images.build(path=context, tag=tag, rm=True)
            except (docker.errors.BuildError, docker.errors.APIError) as exc:
                raise RuntimeError(f"docker build of {DOCKERFILE} failed: {exc}. Without a registry use "
                                   "the host-python (default) or debootstrap image") from exc
    return ImageSpec(tag, "dockerfile", _label(client, tag, "seal.python") or "python3")


# ---------------------------------------------------------------------------------------------- resolution

_BUILDERS: dict[str, Callable[[docker.DockerClient, Progress], ImageSpec]] = {
    "host-python": host_python_image,
    "debootstrap": debootstrap_image,
    "dockerfile": dockerfile_image,
}
_resolved: dict[tuple[int, str], ImageSpec] = {}
_resolved_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global _resolved_lock
    _resolved_lock = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def _label(client: docker.DockerClient, tag: str, key: str) -> str | None:
    return (client.images.get(tag).labels or {}).get(key)


def build_image(client: docker.DockerClient, kind: ImageKind = "host-python",
                progress: Progress = _stderr) -> ImageSpec:
    """Build (or find) the image of this kind."""
    if kind not in _BUILDERS:
        raise ValueError(f"unknown image kind {kind!r}; choose one of {', '.join(KINDS)}")
    return _BUILDERS[kind](client, progress)


def resolve_image(client: docker.DockerClient, image: str | None) -> ImageSpec:
    """The image a ``SandboxConfig.image`` names: None or a kind builds ours, anything else is used as given."""
    name = image or "host-python"
    key = (os.getpid(), name)
    with _resolved_lock:  # one build per process even when many sandboxes start at once
        if key not in _resolved:
            if name in _BUILDERS:
                _resolved[key] = build_image(client, name)  # type: ignore[arg-type]
            else:
                try:
                    python = _label(client, name, "seal.python") or "python3"
                except docker.errors.ImageNotFound:
                    raise RuntimeError(f"sandbox image {name!r} not found on the Docker daemon; build it or use "
                                       f"image=None (SEAL's host-python image)") from None
                _resolved[key] = ImageSpec(name, "custom", python)
        return _resolved[key]
