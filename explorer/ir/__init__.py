"""Reading TVM from Python: walks over a Relax function (:mod:`.relax_walk`) and a TensorIR
statement tree (:mod:`.tir_walk`), and TVM values as plain JSON data (:mod:`.plain`)."""
