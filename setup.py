"""Ships ``seal-gymnasium.pth`` at the root of site-packages (pyproject.toml holds everything else).

The .pth imports ``_seal_gym_hook`` so ``gym.make("seal/ToolUse-v0")`` works without importing seal_envs
(Gymnasium >= 1.0 dropped entry-point plugins). Regular wheels get it through ``build_py``; editable
installs through ``editable_wheel``, which writes the editable wheel from its own directory.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH = "seal-gymnasium.pth"


class BuildWithPth(build_py):
    def run(self):
        super().run()
        if not self.editable_mode:
            self.copy_file(PTH, str(Path(self.build_lib) / PTH))


class EditableWithPth(editable_wheel):
    def _run_build_commands(self, dist_name, unpacked_wheel, build_lib, tmp_dir):
        result = super()._run_build_commands(dist_name, unpacked_wheel, build_lib, tmp_dir)
        shutil.copy(PTH, Path(unpacked_wheel) / PTH)
        return result


setup(cmdclass={"build_py": BuildWithPth, "editable_wheel": EditableWithPth})
