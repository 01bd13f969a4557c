"""``seal-envs``: list what is available, check a domain before training on it, build sandbox images ahead of
time and clean up after killed runs."""

from __future__ import annotations

import argparse
import json
import sys

from seal_envs.sandbox.base import SandboxError


def _image_build(args: argparse.Namespace) -> int:
    from seal_envs.sandbox.docker import docker_client
    from seal_envs.sandbox.image import build_image

    spec = build_image(docker_client(), args.kind)
    print(spec.tag)
    return 0


def _sandbox_reap(args: argparse.Namespace) -> int:
    from seal_envs.sandbox.docker import docker_client
    from seal_envs.sandbox.reaper import reap

    removed = reap(docker_client())
    print(f"removed {len(removed)} orphaned sandbox container(s)")
    return 0


SPLIT_NAMES = ("train", "eval", "sft")  # the split names seal-train and seal-eval ask a domain for


def _list(args: argparse.Namespace) -> int:
    """The registered env ids, then every bundled domain with its tools, its tasks.json and its declared splits."""
    import warnings

    from gymnasium.envs.registration import registry

    import seal_envs  # noqa: F401  (registers the ids)
    from seal_envs.spec import available_domains, load_domain
    from seal_envs.task import TASK_FILE, load_tasks

    print("registered envs (gym.make / gym.make_vec):")
    for env_id in sorted(i for i in registry if i.startswith("seal/")):
        kwargs = registry[env_id].kwargs
        print(f"  {env_id}" + (f"  ({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})" if kwargs else ""))
    print("bundled domains (seal-eval --domain NAME, seal-train seal.domain=NAME):")
    for name in available_domains():
        domain = load_domain(name)
        parts = [f"{len(domain.tools)} tools"]
        if (domain.root / TASK_FILE).is_file():
            one_split = "" if domain.task_splits else " (its one split, 'all')"
            parts.append(f"{TASK_FILE}: {len(load_tasks(domain.root))} tasks{one_split}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for split in SPLIT_NAMES if domain.task_splits else ():
                try:
                    parts.append(f"split {split!r}: {len(domain.split_tasks(split))} tasks")
                except ValueError:
                    continue  # the domain does not declare this split
        print(f"  {name}: " + "; ".join(parts))
    return 0


def _validate(args: argparse.Namespace) -> int:
    from seal_envs.validation import ValidationConfig, validate_domain

    try:
        report = validate_domain(args.domain, ValidationConfig(args.sandbox, args.tasks, args.split), progress=True)
    except ValueError as exc:  # the spec or task file does not load (SpecError says where)
        print(f"seal-envs validate: {exc}", file=sys.stderr)
        return 1
    except SandboxError as exc:
        print(f"seal-envs validate: {exc}\n(for code you trust: --sandbox inprocess)", file=sys.stderr)
        return 1
    for problem in report.problems:
        print(problem)
    print(report.summary())
    return 0 if report.ok else 1


def _mcp_tools(args: argparse.Namespace) -> int:
    from seal_envs.mcp.discovery import spec_from_server, write_spec_from_server
    from seal_envs.sandbox.base import SandboxConfig

    config = SandboxConfig(backend=args.sandbox)
    try:
        if args.write:
            print(f"wrote {write_spec_from_server(args.domain, config)}")
        else:
            print(json.dumps(spec_from_server(args.domain, config), indent=1))
    except ValueError as exc:
        print(f"seal-envs mcp-tools: {exc}", file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    from seal_envs.sandbox.image import KINDS

    parser = argparse.ArgumentParser(prog="seal-envs", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    listing = commands.add_parser("list", help="registered env ids and bundled domains with their splits and counts")
    listing.set_defaults(handler=_list)

    validate = commands.add_parser(
        "validate", help="check a domain: implementations resolve, every task's ground truth replays, obeys the "
                         "tools' schemas and holds its required responses")
    validate.add_argument("domain", help="a bundled domain name (e.g. shop) or a folder with tools.json")
    validate.add_argument("--tasks", help="a tasks.json to check (default: the one beside tools.json)")
    validate.add_argument("--split", help="check the domain's declared task_splits split (e.g. train) instead")
    validate.add_argument("--sandbox", choices=("docker", "inprocess"), default="docker",
                          help="where the ground truth runs (docker, as gym.make; inprocess: no Docker daemon "
                               "needed, no isolation: only for code you trust)")
    validate.set_defaults(handler=_validate)

    mcp_tools = commands.add_parser(
        "mcp-tools", help="start an MCP domain's server in a sandbox and print its tools.json with the tools the "
                          "server lists (--write: replace the file's tools)")
    mcp_tools.add_argument("domain", help="a folder whose tools.json declares an 'mcp' server")
    mcp_tools.add_argument("--write", action="store_true", help="write the tools into the domain's tools.json")
    mcp_tools.add_argument("--sandbox", choices=("docker", "inprocess"), default="docker",
                           help="where the server runs (inprocess: no isolation, only for a server you trust)")
    mcp_tools.set_defaults(handler=_mcp_tools)

    image = commands.add_parser("image", help="sandbox images").add_subparsers(dest="action", required=True)
    build = image.add_parser("build", help="build (or find) a sandbox image and print its tag")
    build.add_argument("--kind", choices=KINDS, default="host-python",
                       help="host-python (default: host Python mounted read-only), debootstrap (minimal Debian "
                            "rootfs, needs root and an apt mirror), dockerfile (docker build, needs a registry)")
    build.set_defaults(handler=_image_build)

    sandbox = commands.add_parser("sandbox", help="sandbox containers").add_subparsers(dest="action", required=True)
    reap = sandbox.add_parser("reap", help="remove containers left behind by dead processes on this host")
    reap.set_defaults(handler=_sandbox_reap)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except (SandboxError, RuntimeError) as exc:
        print(f"seal-envs: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
