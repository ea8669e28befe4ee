"""``ayo_bench``: the stock-vs-Ayo comparison behind ``ayo compare``, installed with Ayo.

* :mod:`ayo_bench.compare`: run an example app stock and optimized on the same engines,
  alternating, and report latency / load figures, identical-answer checks and Ayo's trace.
* :mod:`ayo_bench.timeline`: one query's stage spans, from the frameworks' own hooks (stock)
  and from Ayo's trace.
* :mod:`ayo_bench.plot`: the PNG next to each results file.
* :mod:`ayo_bench.bound`: lower bounds on a query's latency that can say no (the busiest
  engine's busy time; stock's model time minus the work Ayo skipped) and what the gap is made of.
* :mod:`ayo_bench.recorder`: the recording pass-through in front of the LLM server that times
  both apps' model requests.
* :mod:`ayo_bench.provenance`: commit, server version and flags, dtype, model, machine, date.

The apps it drives are ``ayo_examples`` (the repository's ``examples/`` folder). The
repository's ``benchmarks/`` folder keeps scripts (configuration sweeps, the README table)
and the committed results; nothing installed imports it. ``ayo_core`` never imports this
package: the ``ayo`` command looks its ``compare`` entry point up by name when asked.
"""
