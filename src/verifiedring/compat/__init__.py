"""Drop-in shims for engines that import the broadcast queue by their own module path."""
