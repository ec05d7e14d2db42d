"""Horovod's API on dtcomm (``import dtcomm.horovod.torch as hvd``).

Operations are negotiated by name as Horovod does (``dtcomm._dtcomm.Negotiator``, the Rust
core in ``dtcomm::negotiate``): an operation runs once every rank has submitted its name, in
any order, and small allreduces are fused. See ``docs/horovod.md`` for what is covered.
"""
