"""The LLM layer of logdx: backends, masking/cache/breaker around calls, the failure agent,
retrieval of similar cases, and rule writers. Evidence first: rules decide, the LLM aids."""
