"""A throwaway CMake project of shell-command tests, configured and run by this machine's own
ctest: what the CI scripts that read ctest's logs (failed-test-output, slowest-tests) are tested
on, since the lanes have two ctest versions and each writes its own logs."""

import os
import subprocess
import tempfile


class CtestProject:
    """`cmakelists` (with `sources`: file name -> text beside it) configured in a scratch folder,
    built when `compile`, and its tests run once by ctest unless `run` is false; `build` is the
    build folder, `ctest` the finished ctest process (None when not run). cleanup() removes it all."""

    def __init__(self, prefix, cmakelists, sources=None, compile=False, run=True):
        self._scratch = tempfile.TemporaryDirectory(prefix=prefix)
        source = os.path.join(self._scratch.name, "src")
        self.build = os.path.join(self._scratch.name, "build")
        os.makedirs(source)
        with open(os.path.join(source, "CMakeLists.txt"), "w", encoding="utf-8") as f:
            f.write(cmakelists)
        for name, text in (sources or {}).items():
            with open(os.path.join(source, name), "w", encoding="utf-8") as f:
                f.write(text)
        subprocess.run(["cmake", "-S", source, "-B", self.build], check=True, capture_output=True, timeout=120)
        if compile:
            subprocess.run(["cmake", "--build", self.build, "--parallel"], check=True, capture_output=True,
                           timeout=300)
        self.ctest = None
        if run:
            self.ctest = subprocess.run(["ctest", "--test-dir", self.build], capture_output=True, text=True,
                                        timeout=120)

    def cleanup(self):
        self._scratch.cleanup()
