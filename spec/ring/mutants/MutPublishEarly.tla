--------------------------- MODULE MutPublishEarly ---------------------------
(* Mutant (a): publish order reversed: WriterPublish's store written = 1   *)
(* happens BEFORE the read flags are cleared (the clears and the index     *)
(* advance come after it).  Expected: a reader reads in the window, acks   *)
(* (flag = 1), the late clear erases the ack, and it reads the same        *)
(* message again: a duplicate.                                             *)
EXTENDS MC

MutWriterFillPayload ==       \* as WriterFillPayload, but publish comes next
    /\ wpc = "fill"
    /\ payload' = [payload EXCEPT ![windex] = sent + 1]
    /\ wpc' = "publish"
    /\ UNCHANGED <<written, readFlag, windex, wflag, sent, aborts, rvars>>

MutWriterPublish ==           \* written = 1 and the message is sent; no advance yet
    /\ wpc = "publish"
    /\ written' = [written EXCEPT ![windex] = 1]
    /\ sent' = sent + 1
    /\ wpc' = "flags"
    /\ UNCHANGED <<readFlag, payload, windex, wflag, aborts, rvars>>

MutWriterClearReadFlag ==     \* in order; the last clear advances the index
    /\ wpc = "flags"
    /\ readFlag' = [readFlag EXCEPT ![windex][wflag] = 0]
    /\ IF wflag = LastFlag
         THEN /\ wflag' = 0
              /\ windex' = Succ(windex)
              /\ wpc' = IF sent = MaxMsgs THEN "done" ELSE "poll"
         ELSE /\ wflag' = wflag + 1
              /\ UNCHANGED <<windex, wpc>>
    /\ UNCHANGED <<written, payload, sent, aborts, rvars>>

MutWriter == \/ WriterPollWritten \/ WriterPollReadFlag \/ WriterClearWritten
             \/ MutWriterFillPayload \/ WriterAbort \/ MutWriterClearReadFlag
             \/ MutWriterPublish
MutNext == MutWriter \/ (\E r \in Readers : Reader(r)) \/ Done
MutSpec == Init /\ [][MutNext]_vars /\ WF_vars(MutWriter)
           /\ \A r \in Readers : WF_vars(Reader(r))
=============================================================================
