"""draligned: counterfactual behavioural evaluation of deep-research LLM agents."""

__version__ = "0.1.0"
