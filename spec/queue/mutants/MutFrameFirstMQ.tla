-------------------------- MODULE MutFrameFirstMQ ---------------------------
(* Mutant of MessageQueue.tla: the writer sends an overflow object's       *)
(* payload frame on the local socket BEFORE it publishes the marker's      *)
(* chunk, and the publish can then time out on a full ring (the caller's   *)
(* enqueue raises RingTimeoutError, "retrying is safe"). The frame of the  *)
(* abandoned call is already queued under the sequence number that the     *)
(* next call reuses, so a reader pairs the new call's marker with the old  *)
(* call's frame. Expected: DeliveredPrefixInv.                             *)
(* In the code's order nothing is sent before the claim succeeds, so a     *)
(* claim timeout changes nothing the model tracks (MessageQueue.tla has no *)
(* such step).                                                             *)
EXTENDS MCMessageQueue

\* As WriterPublishChunk, but only for an inline object.
MutWriterPublishInline ==
    /\ WriterPublishChunk
    /\ pub'[Len(pub')][1] = "inline"

\* An overflow object: its frame goes out first.
MutWriterSendFrameFirst ==
    /\ wpc = "chunk"
    /\ sent < M
    /\ nobj < M
    /\ LocalReaders # {}
    /\ Publish(LocalReaders, MsgFrame(nseq, CurObj))
    /\ wpc' = "prepub"
    /\ UNCHANGED <<pub, nseq, nobj, sendFails, wrun, rvars, cuts>>

\* Then the marker, once the ring has room.
MutWriterPublishAfterFrame ==
    /\ wpc = "prepub"
    /\ RingHasRoom
    /\ pub' = Append(pub, <<"overflow", nseq, CurObj, 0>>)
    /\ IF RemoteReaders # {} THEN wpc' = "remote" /\ UNCHANGED <<nseq, nobj>>
                             ELSE Finish
    /\ UNCHANGED <<sockQ, lost, sendFails, wrun, rvars, cuts>>

\* Or the claim times out: enqueue raises, the sequence number is not used
\* up, and the caller's next enqueue is another object.
MutWriterRingTimeout ==
    /\ wpc = "prepub"
    /\ ~RingHasRoom
    /\ timeouts < MaxTimeouts
    /\ timeouts' = timeouts + 1
    /\ nobj' = nobj + 1
    /\ wpc' = "chunk"
    /\ UNCHANGED <<pub, nseq, sockQ, lost, sendFails, wrun, released, stash,
                   subscribed, acked, rpc, rseq, pending, shutTotal, brokeTotal,
                   delivered, rchunk, rfail, decodeFails, cuts>>

MutWriterStep ==
    \/ WriterHandshake \/ MutWriterPublishInline \/ MutWriterSendFrameFirst
    \/ MutWriterPublishAfterFrame \/ MutWriterRingTimeout
    \/ WriterSendRemoteFrame \/ WriterSendFails \/ WriterShutdown
    \/ WriterReaderLeft \/ WriterTellBroken

MutNext == MutWriterStep \/ (\E r \in Readers : ReaderStep(r)) \/ Done

MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(MutWriterStep)
                                   /\ \A r \in Readers : WF_vars(ReaderStep(r))
=============================================================================
