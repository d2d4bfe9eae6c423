"""Policies the scheduling cycle consults: tenant queues (quotas, borrowing, reclaim) and power
budgets (headroom, caps, powered-down UltraServers).

Each policy is a book that holds its own state and is handed to the cycle, so the operator, the
REST API and the replay admit alike. The `*specs` modules read the policy objects (TenantQueue,
PowerBudget) into the books' specs and build their status documents.
"""
