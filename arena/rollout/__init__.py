"""Policy rollouts: one episode of a chat model against an environment session, and k-of-n solvability."""
