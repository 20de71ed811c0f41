"""Ships the repository's models.txt inside the package of a built wheel
(the one list of curated pairs lives at the repository root)."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithModels(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "specllama" / "models.txt"
        target.parent.mkdir(parents=True, exist_ok=True)
        self.copy_file("models.txt", str(target))


setup(cmdclass={"build_py": BuildPyWithModels})
