----------------------------- MODULE MCRelaxed -----------------------------
(* Bounded harness for RingBufferRelaxed: the fence sets used by the       *)
(* MCRelaxed_*.cfg configurations.                                          *)
EXTENDS RingBufferRelaxed

FencesAll        == AllFences
FencesNone       == {}
FencesNoFW1      == AllFences \ {"FW1"}
FencesNoFW2      == AllFences \ {"FW2"}
FencesNoFW3      == AllFences \ {"FW3"}
FencesNoFW4      == AllFences \ {"FW4"}
FencesNoFR0      == AllFences \ {"FR0"}
FencesNoFR1      == AllFences \ {"FR1"}
FencesNoFR2      == AllFences \ {"FR2"}
FencesNoFW2FW3   == AllFences \ {"FW2", "FW3"}
FencesNoFR0FW3   == AllFences \ {"FR0", "FW3"}
=============================================================================
