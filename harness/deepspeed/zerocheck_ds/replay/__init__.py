"""One scenario on one rank, op by op (replay.py); the saving world's hand-over of a load with a
world_size (handover.py) and its resumption in a second world (reshard.py)."""
