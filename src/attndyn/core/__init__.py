"""The engine: weights, attention kernels, the dynamics, solvers, simulation (ODE, SDE, long horizons).

Layer contract
--------------
Everything that moves tokens: :class:`~attndyn.Weights`, :class:`~attndyn.Model` and its vector
field, the normalization schemes' table (``schemes``), the Runge-Kutta tableaux and the step
controller (``solvers``), the engine plan (``plan``: which path runs a call, and why not a faster
one) and the C kernels it may choose (``compiled``), :func:`~attndyn.simulate`,
:func:`~attndyn.residual_layers`, the noisy model (``noise``) and the long-horizon integrator
(``longtime``). Its public names are re-exported at the top (``attndyn.simulate``,
``attndyn.Model``, ...). Typed objects in, tensors out; no I/O, no plotting, no config files, with
one exception every layer shares: ``reading``, the bounded readers of files a user hands over
(regular files only, sizes checked before reads, nesting depth bounded).
Imports torch, NumPy and the standard library only: nothing else of attndyn (``solvers`` knows
nothing about attention: it integrates any ``f(t, x, args)``).
"""
