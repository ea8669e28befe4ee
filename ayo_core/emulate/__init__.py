"""An emulated deployment served over the real protocols (``ayo emulate``).

The frameworks' and Ayo's own code talk to it exactly as to a vLLM server and an
OpenAI-compatible embedding server; answers are the real engines' answers (recorded,
then replayed token for token), timing comes from a serving-engine model in wall-clock
time (:mod:`.step_engine`) whose constants are a *profile* (:mod:`.profile`) that cites
the source of every constant. Every figure measured on it is emulated and says so.
"""




