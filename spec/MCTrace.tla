------------------------------ MODULE MCTrace ------------------------------
(* Harness for trace validation. TraceData.tla (TraceLog, the recorded     *)
(* events) and MCTrace.cfg are generated next to copies of the specs in a  *)
(* temporary directory by tests/test_trace_validation.py; see              *)
(* TraceRingBuffer.tla.                                                     *)
EXTENDS TraceRingBuffer, TraceData

\* The real code: a reader's flag index is its local position.
TraceFlagIndex(r) == r
=============================================================================
