"""Development-only tooling that reads template.yaml; never deployed."""
