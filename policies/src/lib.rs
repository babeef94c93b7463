//! specgate's policy engine: per-route acceptance statistics, the cost model, and the choice
//! of draft strategy and k. Pure: no async, no storage, time passed in.
