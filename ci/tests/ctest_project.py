"""A throwaway CMake project of shell-command tests, configured and run by this machine's own
ctest: what the CI scripts that read ctest's logs (failed-test-output, slowest-tests) are tested
on, since the lanes have two ctest versions and each writes its own logs."""

import os
import subprocess
import tempfile


class CtestProject:
    """`cmakelists` configured in a scratch folder and its tests run once by ctest; `build` is the
    build folder, `ctest` the finished ctest process. cleanup() removes it all."""

    def __init__(self, prefix, cmakelists):
        self._scratch = tempfile.TemporaryDirectory(prefix=prefix)
        source = os.path.join(self._scratch.name, "src")
        self.build = os.path.join(self._scratch.name, "build")
        os.makedirs(source)
        with open(os.path.join(source, "CMakeLists.txt"), "w", encoding="utf-8") as f:
            f.write(cmakelists)
        subprocess.run(["cmake", "-S", source, "-B", self.build], check=True, capture_output=True, timeout=120)
        self.ctest = subprocess.run(["ctest", "--test-dir", self.build], capture_output=True, text=True,
                                    timeout=120)

    def cleanup(self):
        self._scratch.cleanup()
