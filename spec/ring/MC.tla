-------------------------------- MODULE MC --------------------------------
(* Bounded harness for RingBuffer: the flag-index mappings a configuration *)
(* can plug in for RingBuffer's FlagIndex.  Bounds are in MC_*.cfg.        *)
EXTENDS RingBuffer

\* Correct code: reader at local position r uses flag byte r.
LocalIndex(r) == r

\* Mutant b1: every reader uses flag byte 0 (two readers share one index).
SharedIndex(r) == 0

\* Mutant b2: the reader uses its global rank; the writer is rank 0 and the
\* local readers are ranks 1..NReaders, so the last one indexes flag byte
\* NReaders, past the chunk's NReaders read-flag bytes.
GlobalRankIndex(r) == r + 1

\* Mutant: the flag index is shifted by one, wrapping around: every reader
\* uses its neighbour's flag byte (in bounds, never shared).
ShiftedIndex(r) == (r + 1) % NReaders

=============================================================================
