"""The rank's world: its size and rank from the environment, torch.distributed start and stop
(world.py), and the checks' object exchange between ranks (exchange.py)."""
