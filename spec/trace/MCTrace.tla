------------------------------ MODULE MCTrace ------------------------------
(* Harness for trace validation. TraceData.tla (TraceLog, the recorded     *)
(* events) and MCTrace.cfg are generated next to copies of the specs in a  *)
(* temporary directory by verifiedring.testing.trace.validate; see         *)
(* TraceRingBuffer.tla.                                                     *)
EXTENDS TraceRingBuffer, TraceData

\* The real code: a reader's flag index is its local position.
TraceFlagIndex(r) == r

\* The recorded events, bound to Trace in MCTrace.cfg. Through CHOOSE, TLC
\* evaluates the long tuple once; bound to TraceLog itself it rebuilt it at
\* every reference (a 3,000-event trace: 4 s against more than 100 s).
TraceValue == CHOOSE t \in {TraceLog} : TRUE
=============================================================================
