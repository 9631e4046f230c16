"""Training jobs as the scheduler reports them, their attempts and hosts."""
