"""``ray.experimental``: only the state API that frameworks import (``state.api.get_actor``)."""
