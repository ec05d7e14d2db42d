"""``horovod.torch.elastic`` as ``dtcomm.horovod.torch.elastic`` (put here by
``dtrun --horovod``)."""

from dtcomm.horovod.torch.elastic import *  # noqa: F401,F403
from dtcomm.horovod.torch.elastic import __all__  # noqa: F401
