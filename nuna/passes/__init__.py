"""Plan-rewriting passes (UA, NUMA, NAP, NAP*, NAR) and named configurations."""
