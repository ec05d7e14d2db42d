"""``dtrun``: starts the worker processes of a job on this node, with the environment
torchrun gives them, and a rendezvous (an embedded ``dt-rdzv`` or a running one).

* ``cli``: the command line;
* ``rendezvous``: the embedded server, or joining a running one as node k of N;
* ``workers``: spawning, rank-prefixed output, stopping the group when one worker fails.
"""
