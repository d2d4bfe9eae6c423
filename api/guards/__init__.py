"""What keeps one client from starving the others: connection caps and read deadlines
(`connections`), request body limits (`bodylimits`) and per-client rate limits
(`ratelimits`)."""
