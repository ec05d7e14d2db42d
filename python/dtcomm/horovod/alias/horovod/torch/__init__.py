"""``horovod.torch`` as ``dtcomm.horovod.torch`` (put here by ``dtrun --horovod``)."""

from dtcomm.horovod.torch import *  # noqa: F401,F403
from dtcomm.horovod.torch import __all__  # noqa: F401
