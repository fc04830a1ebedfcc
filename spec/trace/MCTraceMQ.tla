------------------------------ MODULE MCTraceMQ ------------------------------
(* Harness for the message queue's trace validation. TraceData.tla (TraceLog, *)
(* the recorded events) and MCTraceMQ.cfg are generated next to copies of the *)
(* specs in a temporary directory by verifiedring.testing.queue_trace; see    *)
(* TraceMessageQueue.tla.                                                     *)
EXTENDS TraceMessageQueue, TraceData

\* Evaluated once through CHOOSE (see MCTrace.tla).
TraceValue == CHOOSE t \in {TraceLog} : TRUE
=============================================================================
