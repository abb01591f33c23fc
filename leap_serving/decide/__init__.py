"""Deciding: ranking a launch's candidates, and the measures of how good a decision is.

The Ranker (``ranker``) and its parts: following the model pointer (``following``, ``loaded``),
the shadow canary (``canary``), the routing switches (``switches``), the typing of a launch
(``launch_fields``), the pricing policy (``pricing``) and what a ranking returns (``results``);
the trial worth a run (``exploration``), the latency watch (``latency``) and the accuracy metrics
(``metrics``).
"""
