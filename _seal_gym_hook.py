"""Make ``gym.make("seal/...")`` work without ``import seal_envs``.

Gymnasium >= 1.0 no longer loads ``gymnasium.envs`` entry points, so this tiny module (imported at
interpreter start by ``seal-gymnasium.pth``) waits for ``gymnasium`` to be imported and then registers
SEAL's env ids. It imports nothing itself until then, so it costs nothing for programs without gymnasium.
"""

import sys
from importlib.abc import MetaPathFinder


class _RegisterAfterGymnasium(MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != "gymnasium.envs.registration":
            return None
        sys.meta_path.remove(self)
        from importlib.util import find_spec

        spec = find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_register(module):
            exec_module(module)
            try:
                import seal_envs  # noqa: F401  (registers on import)
            except Exception:  # never break gymnasium's import because of us
                pass

        spec.loader.exec_module = exec_and_register
        return spec


def install() -> None:
    if not any(isinstance(f, _RegisterAfterGymnasium) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterGymnasium())
