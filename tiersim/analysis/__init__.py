"""What a result means: explanations, tables, figures, capacity planning and the seed study."""
