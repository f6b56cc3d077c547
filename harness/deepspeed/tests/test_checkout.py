"""A DeepSpeed tree's commit is named only where the tree is a checkout of its own: not the HEAD of
a repository it sits inside, and no error where git is missing."""

import os
import shutil
import subprocess
import tempfile
import unittest
from unittest import mock

from zerocheck_ds.engines.checkout import checkout_commit

GIT = shutil.which("git")


def git(folder, *arguments):
    subprocess.run(["git", "-C", folder, "-c", "user.name=t", "-c", "user.email=t@t",
                    *arguments], check=True, capture_output=True)


@unittest.skipIf(GIT is None, "no git on this machine")
class CheckoutCommit(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.repo = os.path.join(self._tmp.name, "repo")
        os.makedirs(os.path.join(self.repo, "vendored", "deepspeed"))
        with open(os.path.join(self.repo, "vendored", "deepspeed", "__init__.py"), "w") as f:
            f.write("")
        git(self.repo, "init", "-q")
        git(self.repo, "add", ".")
        git(self.repo, "commit", "-q", "-m", "one")
        head = subprocess.run(["git", "-C", self.repo, "rev-parse", "HEAD"], check=True,
                              capture_output=True, text=True)
        self.head = head.stdout.strip()

    def tearDown(self):
        self._tmp.cleanup()

    def test_the_top_level_of_a_checkout_gets_its_short_commit(self):
        self.assertEqual(checkout_commit(self.repo), self.head[:12])
        self.assertEqual(checkout_commit(self.repo, length=9), self.head[:9])

    def test_a_tree_inside_another_repository_gets_none(self):
        # `git -C TREE rev-parse HEAD` would name the enclosing repository's HEAD here.
        self.assertIsNone(checkout_commit(os.path.join(self.repo, "vendored")))

    def test_a_folder_that_is_no_checkout_gets_none(self):
        plain = os.path.join(self._tmp.name, "plain")
        os.makedirs(plain)
        with mock.patch.dict(os.environ, GIT_CEILING_DIRECTORIES=self._tmp.name):
            self.assertIsNone(checkout_commit(plain))
        self.assertIsNone(checkout_commit(os.path.join(self._tmp.name, "missing")))

    def test_without_git_on_the_path_it_is_none_not_an_error(self):
        with mock.patch.dict(os.environ, PATH=os.path.join(self._tmp.name, "empty")):
            self.assertIsNone(checkout_commit(self.repo))


class ProducedOn(unittest.TestCase):
    def test_the_header_names_the_version_and_commit_never_the_path(self):
        from zerocheck_ds.repro.minimise import produced_on

        class Args:
            adapter, deepspeed_tree = "deepspeed", os.path.join(tempfile.gettempdir(), "nowhere")
        with mock.patch("zerocheck_ds.repro.minimise.checkout_commit", return_value="abc123"):
            self.assertEqual(produced_on(Args, "0.14.5"), "deepspeed 0.14.5, commit abc123")
        with mock.patch("zerocheck_ds.repro.minimise.checkout_commit", return_value=None):
            self.assertEqual(produced_on(Args, None), "deepspeed (version unknown)")


if __name__ == "__main__":
    unittest.main()
