"""The agent: runs jobs as real processes (runner, launcher, supervisors) and reports them."""
