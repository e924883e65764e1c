"""Chat orchestration: validate → route (classifier, explicit model, escalation, fallback) → generate on the
tier → cost → metrics, SQL log and the quality monitor. The HTTP layer (aio.server) only wires requests to
ChatService.

service: the orchestrator; tier_selection: which tier serves (context fit, health, fallback); generation: the
tier's chunks into a GenerationState; cascade: the confidence cascade (an unsure answer is answered again one
tier up); confidence: how sure a tier was of its answer; accounting: metrics, the request record, the monitor
hand-off; openai_shapes: the response and chunk bodies; context: the plain data they pass around."""
