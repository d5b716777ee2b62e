"""``ray.experimental.state``, Ray's older path of ``ray.util.state``."""
