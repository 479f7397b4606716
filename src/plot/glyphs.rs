//! PNG text. plotters 0.3.7's ab_glyph renderer places every glyph at its advance but drops the
//! glyph's left side bearing, so letters drift apart or together ("m s per"). [`Glyphs`] wraps
//! a drawing backend, draws text itself with ab_glyph from the same embedded font (bearings,
//! kerning, the four rotations, anchors on the font's ascent/descent) and passes every other
//! call to the wrapped backend unchanged. Widths agree with plotters' own text-size estimate
//! (both sum advances and kerning), so layouts computed from `box_size` still fit.

use std::sync::OnceLock;

use ab_glyph::{Font, FontRef, PxScale, ScaleFont, point};
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind};

use super::FONT;

fn face() -> Option<&'static FontRef<'static>> {
    static FACE: OnceLock<Option<FontRef<'static>>> = OnceLock::new();
    FACE.get_or_init(|| FontRef::try_from_slice(FONT).ok()).as_ref()
}

/// A backend whose text is drawn by ab_glyph (see the module header).
pub(crate) struct Glyphs<B>(pub B);

impl<B: DrawingBackend> DrawingBackend for Glyphs<B> {
    type ErrorType = B::ErrorType;

    fn get_size(&self) -> (u32, u32) {
        self.0.get_size()
    }

    fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.ensure_prepared()
    }

    fn present(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.present()
    }

    fn draw_pixel(&mut self, p: BackendCoord, c: BackendColor) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_pixel(p, c)
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        a: BackendCoord,
        b: BackendCoord,
        s: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_line(a, b, s)
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        a: BackendCoord,
        b: BackendCoord,
        s: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_rect(a, b, s, fill)
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        s: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_path(path, s)
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        c: BackendCoord,
        r: u32,
        s: &S,
        fill: bool,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.draw_circle(c, r, s, fill)
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        s: &S,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.fill_polygon(vert, s)
    }

    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        let color = style.color();
        let Some(face) = face().filter(|_| color.alpha > 0.0) else {
            return self.0.draw_text(text, style, pos);
        };
        let font = face.as_scaled(PxScale::from(style.size() as f32));
        let (mut caret, mut prev, mut glyphs) = (0.0f32, None, vec![]);
        for c in text.chars() {
            let id = font.glyph_id(c);
            if let Some(p) = prev {
                caret += font.kern(p, id);
            }
            glyphs.push(id.with_scale_and_position(font.scale(), point(caret, 0.0)));
            caret += font.h_advance(id);
            prev = Some(id);
        }
        // Offsets from the anchor to the start of the baseline, in text-local pixels.
        let dx = match style.anchor().h_pos {
            HPos::Left => 0.0,
            HPos::Center => -caret / 2.0,
            HPos::Right => -caret,
        };
        let dy = match style.anchor().v_pos {
            VPos::Top => font.ascent(),
            VPos::Center => (font.ascent() + font.descent()) / 2.0,
            VPos::Bottom => font.descent(),
        };
        let (dx, dy) = (dx.round() as i32, dy.round() as i32);
        let trans = style.transform();
        for g in glyphs {
            let Some(outline) = face.outline_glyph(g) else { continue };
            let b = outline.px_bounds();
            let (bx, by) = (b.min.x as i32 + dx, b.min.y as i32 + dy);
            let mut cover = vec![];
            outline.draw(|x, y, c| cover.push((x as i32 + bx, y as i32 + by, c)));
            for (x, y, c) in cover.into_iter().filter(|p| p.2 > 0.0) {
                let (tx, ty) = trans.transform(x, y);
                let ink = BackendColor { alpha: color.alpha * f64::from(c.min(1.0)), rgb: color.rgb };
                self.0.draw_pixel((pos.0 + tx, pos.1 + ty), ink)?;
            }
        }
        Ok(())
    }

    fn estimate_text_size<S: BackendTextStyle>(
        &self,
        text: &str,
        style: &S,
    ) -> Result<(u32, u32), DrawingErrorKind<Self::ErrorType>> {
        self.0.estimate_text_size(text, style)
    }

    fn blit_bitmap(
        &mut self,
        pos: BackendCoord,
        size: (u32, u32),
        src: &[u8],
    ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
        self.0.blit_bitmap(pos, size, src)
    }
}
