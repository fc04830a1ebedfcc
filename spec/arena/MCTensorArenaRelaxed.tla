------------------------- MODULE MCTensorArenaRelaxed -------------------------
(* Bounded harness for TensorArenaRelaxed: the fence sets used by the        *)
(* MCTensorArenaRelaxed_*.cfg configurations.                                *)
EXTENDS TensorArenaRelaxed

FencesAll    == AllFences
FencesNoFA4FA5 == AllFences \ {"FA4", "FA5"}  \* the code before FA4, FA5
FencesNoFA1  == AllFences \ {"FA1"}
FencesNoFA2  == AllFences \ {"FA2"}
FencesNoFA3  == AllFences \ {"FA3"}
FencesNoFA4  == AllFences \ {"FA4"}
FencesNoFA5  == AllFences \ {"FA5"}
=============================================================================
