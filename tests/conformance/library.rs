//! The library on its own: replicas and the AOF hold exactly the primary's keys, racing
//! clients never exceed the bound, the other backend's keys are refused, EVALSHA works.
