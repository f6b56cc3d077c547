"""The saving world's half of a load with `world_size` (`--reshard`): at the load, rank 0 stages
a copy of the checkpoint the load reads, the state it saved and the dense twin's checkpoint of the
same save, in a folder the second world (reshard.py) resumes from.
"""

import os
import shutil

import torch

SNAPSHOT = "snapshot.pt"  # the saved state and the twin's checkpoint, in the staged folder


def folder_of(checkpoint_dir, op_index):
    """Where the saving world stages the checkpoint a load at `op_index` hands over."""
    return os.path.join(checkpoint_dir, f"reshard-{op_index}")


def resolve_tag(checkpoint_dir, tag):
    """The tag a load of `tag` reads (None: the one `latest` names), or None when there is none."""
    if tag is not None:
        return tag
    try:
        with open(os.path.join(checkpoint_dir, "latest"), encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


def stage(checkpoint_dir, op_index, tag, snapshot, twin=None):
    """Rank 0 of the saving world, at the load: copies the checkpoint the load reads (later saves
    may overwrite it), the saved state and the dense twin's checkpoint of the same save (None:
    the twin did not follow); returns the folder, or raises OSError."""
    folder = folder_of(checkpoint_dir, op_index)
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(os.path.join(checkpoint_dir, tag), os.path.join(folder, "saved", tag))
    with open(os.path.join(folder, "saved", "latest"), "w", encoding="utf-8") as f:
        f.write(tag)
    torch.save({"tag": tag, "state": snapshot, "twin": twin}, os.path.join(folder, SNAPSHOT))
    return folder
