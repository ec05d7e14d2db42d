"""An alias put on ``PYTHONPATH`` by ``dtrun --horovod`` only: ``import horovod.torch`` runs
on dtcomm (``dtcomm.horovod.torch``) without anything named ``horovod`` installed."""

__version__ = "0.28.1+dtcomm"
