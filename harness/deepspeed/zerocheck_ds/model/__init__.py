"""What must hold: the module tree (tree.py), the dense twin (twin.py), the partition rules
(partition_model.py), the seeded values (seeded.py) and the user's values (values.py)."""
