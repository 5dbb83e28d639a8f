"""The application edge: the CLI, the report page, the sweep driver and ledger, checkpoint pages.

Layer contract
--------------
Where users meet attndyn: the ``attndyn`` command (``cli``, ``cli_common`` and one module per
command group in ``commands``), the report of every claim (``report``, ``browser``), running and
reading sweeps (``sweep_driver``, ``ledger``, ``sweep_results``) and the checkpoint page
(``checkpoint_page``). May import every layer below;
nothing in attndyn imports it (the old path ``attndyn.sweep`` is a re-export for users).
"""
